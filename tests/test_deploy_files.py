"""docker-compose.yml, Dockerfile and deploy/k8s/*.yaml agree with the services and each other.

The checks live in :mod:`tools.deploycheck`; here they run on the repository's
files (no problem allowed) and on in-memory copies with one thing broken (the
checker must report it).
"""

from __future__ import annotations

import copy
import fnmatch
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.deploycheck.__main__ import main as deploycheck_main
from tools.deploycheck.compose import check_compose
from tools.deploycheck.docker import (
    check_dockerfile,
    dockerfile_instructions,
    image_user,
    owned_dirs,
)
from tools.deploycheck.k8s import KUBERNETES_VERSION, check_k8s, pod_instances, schema_problems
from tools.envtable import embedded_table, markdown_table

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return (REPO / "Dockerfile").read_text()


@pytest.fixture(scope="module")
def k8s() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def image_dirs(dockerfile: str) -> set[str]:
    return owned_dirs(dockerfile)


@pytest.fixture(scope="module")
def image_uid(dockerfile: str) -> int | None:
    return image_user(dockerfile)[1]


def reported(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


# --- the repository's files ----------------------------------------------------------

def test_compose_is_consistent(compose: dict[str, Any], image_dirs: set[str]) -> None:
    assert check_compose(compose) == []
    assert check_compose(compose, image_dirs=image_dirs) == []


def test_compose_with_user_data_and_more_workers(compose: dict[str, Any]) -> None:
    variables = {"FTRL_PS_NUM_WORKERS": "5", "DATA_DIR": "./mydata", "TRAIN_PATH": "/data/a9a",
                 "TEST_PATH": "", "FTRL_PS_TOKEN": "0123abcd"}
    assert check_compose(compose, variables) == []


def test_compose_shape(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["worker"]["environment"]["FTRL_PS_WORKER_INDEX"] == "auto"
    assert services["worker"]["deploy"]["replicas"] == "${FTRL_PS_NUM_WORKERS:-3}"
    assert services["server-0"]["environment"]["FTRL_PS_SHARD_INDEX"] == "0"
    assert services["export"]["environment"]["FTRL_PS_WAIT"] == "1"
    assert services["gen"]["command"] == ["python", "-m", "services.gen"]


def test_dockerfile_is_consistent(dockerfile: str) -> None:
    assert check_dockerfile(dockerfile) == []


def test_k8s_manifests_are_consistent(k8s: list[dict[str, Any]], image_uid: int | None) -> None:
    kinds = sorted(d["kind"] for d in k8s)
    assert kinds.count("Job") == 3 and "StatefulSet" in kinds and "Secret" in kinds, kinds
    assert "Deployment" in kinds
    assert image_uid == 10001
    assert check_k8s(k8s, image_uid=image_uid) == []


def test_k8s_schemas_are_checked_offline(k8s: list[dict[str, Any]],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """kubernetes-validate ships the schemas: no network is touched."""
    def no_network(*args: Any) -> None:
        raise AssertionError("kubernetes-validate tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    assert KUBERNETES_VERSION.startswith("1.")
    assert schema_problems(k8s) == []
    broken = _set(k8s[0], "spec/template/spec/containers/0/imagePulPolicy", "Always")
    assert reported(schema_problems([broken]), f"not valid Kubernetes {KUBERNETES_VERSION[:4]} "
                    "(strict)", "imagePulPolicy")


def test_k8s_pods_are_simulated(k8s: list[dict[str, Any]]) -> None:
    sts = next(d for d in k8s if d["kind"] == "StatefulSet")
    job = next(d for d in k8s if d.get("spec", {}).get("completionMode") == "Indexed")
    assert [env["HOSTNAME"] for _, env in pod_instances(sts)] == [
        "ftrl-ps-server-0", "ftrl-ps-server-1"]
    assert [env["JOB_COMPLETION_INDEX"] for _, env in pod_instances(job)] == ["0", "1", "2"]


def test_env_table_in_docs_is_up_to_date() -> None:
    text = (REPO / "docs" / "deployment.md").read_text()
    assert embedded_table(text) == markdown_table(), (
        "run: python -m tools.envtable --write docs/deployment.md")


def test_deploycheck_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert deploycheck_main([str(REPO)]) == 0
    assert capsys.readouterr().out == "0 problem(s)\n"


def test_dockerignore_keeps_the_source() -> None:
    patterns = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for needed in ("pyproject.toml", "ftrl_ps", "services"):
        assert not any(fnmatch.fnmatch(needed, p) for p in patterns), needed
    assert "**/__pycache__" in patterns and ".git" in patterns


# --- the checker can fail ------------------------------------------------------------

def _set(doc: Any, path: str, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    *parents, last = [key.replace("~1", "/") for key in path.split("/")]  # JSON-pointer style
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


_DELETE = object()


def test_compose_renamed_flag_is_reported(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    env = broken["services"]["worker"]["environment"]
    env["FTRL_PS_BATCH_SIZ"] = env.pop("FTRL_PS_BATCH_SIZE")
    problems = check_compose(broken)
    assert reported(problems, "compose service worker", "FTRL_PS_BATCH_SIZ",
                    "did you mean FTRL_PS_BATCH_SIZE")


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("services/server-1/environment/FTRL_PS_PORT", "70o0", "FTRL_PS_PORT='70o0'"),
        ("services/server-0/environment/FTRL_PS_STALENESS", "-1", "FTRL_PS_STALENESS='-1'"),
        ("services/export/environment/FTRL_PS_WAIT", "maybe", "FTRL_PS_WAIT='maybe'"),
        ("services/export/environment/FTRL_PS_FETCH_STEP", "2", "FTRL_PS_FETCH_STEP"),
        ("services/export/command", ["python", "-m", "services.exporter"], "services.exporter"),
        ("services/export/environment/FTRL_PS_SERVER",
         "http://server-0:7000,http://server-1:7001", "shard 1 URL server-1:7001"),
        ("services/export/environment/FTRL_PS_SERVER", "http://server-0:7000", "1 server URL"),
        ("services/server-1/environment/FTRL_PS_SHARD_INDEX", "0", "shard indices"),
        ("services/server-1/environment/FTRL_PS_HOST", "127.0.0.1", "binds 127.0.0.1"),
        ("services/server-1/environment/FTRL_PS_BITS", "22", "disagree on FTRL_PS_BITS"),
        ("services/server-0/environment/FTRL_PS_NUM_WORKERS", "4",
         "replicas but FTRL_PS_NUM_WORKERS"),
        ("services/export/environment/FTRL_PS_TOKEN", "other", "token differs"),
        ("services/server-1/healthcheck", {"disable": True}, "healthcheck"),
        ("services/export/depends_on/server-1/condition", "service_started", "service_healthy"),
        ("services/export/depends_on/gen/condition", "service_started", "completed"),
        ("services/export/volumes", ["models:/models"], "/data/test.svm is on no volume"),
        ("services/export/volumes/1", "models:/models:ro", "not on a writable volume"),
        ("services/gen/environment/FTRL_PS_SKIP_IF_EXISTS", "/data/x", "SKIP_IF_EXISTS"),
        ("services/worker/deploy/replicas", 4, "4 replicas"),
        ("services/worker/environment/FTRL_PS_WORKER_INDEX", "0", "WORKER_INDEX=auto"),
        ("services/worker/restart", _DELETE, "on-failure"),
        ("services/worker/depends_on", {"gen": {"condition": "service_completed_successfully"}},
         "has a restart policy, so no depends_on"),
        ("services/server-1/restart", _DELETE, "a killed shard must come back"),
        ("services/server-0/environment/FTRL_PS_CHECKPOINT_DIR", _DELETE,
         "no FTRL_PS_CHECKPOINT_DIR"),
        ("services/server-1/volumes", [], "/checkpoints is not on a writable volume"),
        ("services/worker/volumes/1", "worker-state:/state:ro", "/state is not on a writable"),
        ("services/worker/deploy/mode", _DELETE, "deploy.mode: replicated"),
        ("services/worker/environment/FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("services/export/environment/FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("services/serve/environment/FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("services/export/environment/FTRL_PS_WAIT", "0", "should wait for the workers"),
        ("services/export/environment/FTRL_PS_ALLOW_INCOMPLETE", "1", "incomplete run"),
        ("services/serve/environment/FTRL_PS_SERVER", "http://server-0:7000",
         "compose service serve: 1 server URL"),
        ("services/serve/environment/FTRL_PS_TOKEN", "other", "serve: token differs"),
        ("services/serve/environment/FTRL_PS_PUSH_INTERVAL", "0", "push_interval must be > 0"),
        ("services/serve/environment/FTRL_PS_LERN", "1", "did you mean FTRL_PS_LEARN"),
        ("services/serve/healthcheck", {"disable": True}, "serve: healthcheck must GET :8000"),
        ("services/serve/ports/0", "127.0.0.1:8000:8001", "container port 8000"),
        ("services/serve/ports/0", "8000:8000", "'8000:8000' is published on every interface"),
        ("services/grafana/ports/0", "3000:3000", "grafana: port '3000:3000' is published"),
        ("services/prometheus/ports/0", {"target": 9090, "published": 9090},
         "prometheus: port {'target': 9090, 'published': 9090} is published"),
        ("services/serve/depends_on/server-0/condition", "service_started",
         "serve: must depend on server-0"),
        ("services/serve", _DELETE, "no (valid) serve service"),
    ],
)
def test_compose_mutation_is_reported(compose: dict[str, Any], path: str, value: Any,
                                      needle: str) -> None:
    assert not reported(check_compose(compose), needle)
    problems = check_compose(_set(compose, path, value))
    assert reported(problems, needle), problems


def test_compose_variable_without_default_is_reported(compose: dict[str, Any]) -> None:
    broken = _set(compose, "services/export/environment/FTRL_PS_MODEL", "/models/${NAME}")
    assert reported(check_compose(broken), "NAME is unset")


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("COPY ftrl_ps ./ftrl_ps\n", "", "before the source"),  # moved before pip, below
        ("USER app\n", "USER root\n", "non-root USER"),
        ("USER app\n", "", "non-root USER"),
        ("PYTHONUNBUFFERED=1", "PYTHONUNBUFFERED=0", "PYTHONUNBUFFERED"),
        ("NUMBA_CACHE_DIR=", "NUMBA_CACHE=", "NUMBA_CACHE_DIR"),
        ("HEALTHCHECK", "#HEALTHCHECK", "HEALTHCHECK missing"),
        ("/health'", "/status'", "GET /health"),
        ('"services.server"]', '"services.sever"]', "services.sever"),
        ("--test-rows 500", "--test-rowz 500", "--test-rowz"),
        ("--workers 1 --servers 1", "--workers 1 --shards 1", "--shards"),
        ("FROM python:3.11-slim", "FROM python:3.12", "python:3.11-slim"),
    ],
)
def test_dockerfile_mutation_is_reported(dockerfile: str, old: str, new: str,
                                         needle: str) -> None:
    assert old in dockerfile
    broken = dockerfile.replace(old, new, 1)
    if old.startswith("COPY ftrl_ps"):
        broken = broken.replace("COPY pyproject.toml ./\n", "COPY pyproject.toml ./\n" + old)
    problems = check_dockerfile(broken)
    assert reported(problems, needle), problems


def test_dockerfile_continuation_lines_are_joined(dockerfile: str) -> None:
    ins = dockerfile_instructions(dockerfile)
    run = [a for k, a in ins if k == "RUN" and "ftrl_ps train" in a]
    assert run and "--servers 1" in run[0] and "rm -rf" in run[0]


def _k8s(docs: list[dict[str, Any]], kind: str, name: str) -> int:
    return next(i for i, d in enumerate(docs) if d["kind"] == kind and
                d["metadata"]["name"] == name)


def _env_index(container: dict[str, Any], name: str) -> int:
    return next(i for i, e in enumerate(container["env"]) if e["name"] == name)


@pytest.mark.parametrize(
    ("kind", "name", "path", "value", "needle"),
    [
        ("StatefulSet", "ftrl-ps-server", "spec/replicas", 3, "expected 0 of 3"),
        ("StatefulSet", "ftrl-ps-server", "spec/serviceName", "nope", "names no Service"),
        ("Service", "ftrl-ps-server", "spec/clusterIP", _DELETE, "headless"),
        ("Service", "ftrl-ps-server", "spec/selector/app.kubernetes.io~1component", "x",
         "selector"),
        ("Service", "ftrl-ps-server", "spec/ports/0/port", 7001, "no port 7000"),
        ("Job", "ftrl-ps-worker", "spec/completions", 4, "completions 4"),
        ("Job", "ftrl-ps-worker", "spec/parallelism", 2, "parallelism"),
        ("Job", "ftrl-ps-worker", "spec/completionMode", "NonIndexed",
         "FTRL_PS_WORKER_INDEX is required"),
        ("Job", "ftrl-ps-worker", "spec/template/spec/volumes/0/persistentVolumeClaim/"
         "claimName", "nope", "missing PVC nope"),
        ("Secret", "ftrl-ps-token", "stringData", {"tokn": "x"}, "missing secret key"),
        # the API schemas (strict): unknown fields, wrong types, unknown versions
        ("Job", "ftrl-ps-worker", "spec/template/spec/containers/0/imagePulPolicy", "Always",
         "'imagePulPolicy' was unexpected"),
        ("StatefulSet", "ftrl-ps-server", "spec/template/spec/containers/0/ports/0/"
         "containerPort", "7000", "ports.0.containerPort: '7000' is not of type 'integer'"),
        ("Job", "ftrl-ps-export", "spec/backofLimit", 4, "'backofLimit' was unexpected"),
        ("Job", "ftrl-ps-gen", "apiVersion", "batch/v2", "Couldn't find schema for kind Job"),
        ("PersistentVolumeClaim", "ftrl-ps-data", "spec/accessModes", "ReadWriteMany",
         "spec.accessModes: 'ReadWriteMany' is not of type 'array'"),
        ("Deployment", "ftrl-ps-serve", "spec/template/spec/containers/0/readinessProbe/"
         "httpGet/path", "/health", "readinessProbe must GET /ready"),
        ("Deployment", "ftrl-ps-serve", "spec/template/spec/containers/0/livenessProbe",
         _DELETE, "livenessProbe must GET /health"),
        ("Deployment", "ftrl-ps-serve", "spec/template/spec/containers/0/startupProbe",
         _DELETE, "kill it after 30 s"),
        ("Deployment", "ftrl-ps-serve", "spec/template/metadata/labels/"
         "app.kubernetes.io~1component", "x", "no Service selects its pods"),
        ("Service", "ftrl-ps-serve", "spec/ports/0/targetPort", 9000, "no Service selects"),
        ("Deployment", "ftrl-ps-serve", "kind", "DaemonSet", "should be a Deployment"),
    ],
)
def test_k8s_mutation_is_reported(k8s: list[dict[str, Any]], kind: str, name: str, path: str,
                                  value: Any, needle: str) -> None:
    assert not reported(check_k8s(k8s), needle)
    docs = copy.deepcopy(k8s)
    i = _k8s(docs, kind, name)
    docs[i] = _set(docs[i], path, value)
    problems = check_k8s(docs)
    assert reported(problems, needle), problems


@pytest.mark.parametrize(
    ("job", "container", "var", "value", "needle"),
    [
        ("ftrl-ps-worker", "worker", "FTRL_PS_BATCH_SIZE", None, "FTRL_PS_BATCH_SIZ"),
        ("ftrl-ps-worker", "worker", "FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("ftrl-ps-export", "export", "FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("ftrl-ps-serve", "serve", "FTRL_PS_START_TIMEOUT", "0", "FTRL_PS_START_TIMEOUT is 0"),
        ("ftrl-ps-serve", "serve", "FTRL_PS_START_TIMEOUT", "900", "kill it after 625 s"),
        ("ftrl-ps-export", "export", "FTRL_PS_ALLOW_INCOMPLETE", "yes", "incomplete run"),
        ("ftrl-ps-worker", "worker", "FTRL_PS_SERVER",
         "http://ftrl-ps-server-1.ftrl-ps-server:7000,http://ftrl-ps-server-0.ftrl-ps-server:7000",
         "shard 0 URL ftrl-ps-server-1"),
        ("ftrl-ps-worker", "worker", "FTRL_PS_INPUT", "/tmp/train.svm", "on no mounted volume"),
        ("ftrl-ps-worker", "worker", "FTRL_PS_NUM_WORKERS", "2", "FTRL_PS_NUM_WORKERS 2"),
        ("ftrl-ps-export", "export", "FTRL_PS_WAIT", "0", "should wait"),
        ("ftrl-ps-export", "export", "FTRL_PS_MODEL", "/data/model.ftrl", "read-only"),
        ("ftrl-ps-server", "server", "FTRL_PS_NUM_SHARDS", "3", "expected 0 of 2"),
        ("ftrl-ps-server", "server", "FTRL_PS_PORT", "7001", "no containerPort 7001"),
        ("ftrl-ps-server", "server", "FTRL_PS_CHECKPOINT_DIR", "/tmp/ckpt",
         "/tmp/ckpt is on no mounted volume"),
        ("ftrl-ps-worker", "worker", "FTRL_PS_STATE_DIR", "/data/state", "read-only"),
        ("ftrl-ps-serve", "serve", "FTRL_PS_SERVER",
         "http://ftrl-ps-server-0.ftrl-ps-server:7000", "1 server URL(s) for 2 shards"),
        ("ftrl-ps-serve", "serve", "FTRL_PS_PORT", "8001", "no containerPort 8001"),
        ("ftrl-ps-serve", "serve", "FTRL_PS_REFRESH", None, "FTRL_PS_REFRES"),
    ],
)
def test_k8s_env_mutation_is_reported(k8s: list[dict[str, Any]], job: str, container: str,
                                      var: str, value: str | None, needle: str) -> None:
    assert not reported(check_k8s(k8s), needle)
    docs = copy.deepcopy(k8s)
    doc = next(d for d in docs if d["metadata"]["name"] == job and d["kind"] != "Service")
    spec = doc["spec"]["template"]["spec"]
    c = next(c for c in spec["containers"] if c["name"] == container)
    if all(e["name"] != var for e in c["env"]):
        c["env"].append({"name": var, "value": ""})
    entry = c["env"][_env_index(c, var)]
    if value is None:
        entry["name"] = var[:-1]  # a typo
    else:
        entry["value"] = value
    problems = check_k8s(docs)
    assert reported(problems, needle), problems


def test_k8s_init_container_may_do_the_waiting(k8s: list[dict[str, Any]]) -> None:
    """An init container ``services.wait worker`` may wait instead of the worker; it
    must have the worker's environment."""
    docs = copy.deepcopy(k8s)
    spec = docs[_k8s(docs, "Job", "ftrl-ps-worker")]["spec"]["template"]["spec"]
    main = spec["containers"][0]
    main["env"].append({"name": "FTRL_PS_START_TIMEOUT", "value": "0"})
    assert reported(check_k8s(docs), "FTRL_PS_START_TIMEOUT is 0")
    spec["initContainers"] = [{"name": "wait", "image": main["image"],
                               "command": ["python", "-m", "services.wait", "worker"],
                               "env": copy.deepcopy(main["env"]),
                               "volumeMounts": main["volumeMounts"]}]
    assert check_k8s(docs) == []
    spec["initContainers"][0]["env"][_env_index(main, "FTRL_PS_INPUT")]["value"] = "/data/x"
    assert reported(check_k8s(docs), "container wait", "env differs")


def test_k8s_explicit_shard_index_is_reported(k8s: list[dict[str, Any]]) -> None:
    docs = copy.deepcopy(k8s)
    sts = docs[_k8s(docs, "StatefulSet", "ftrl-ps-server")]
    sts["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "FTRL_PS_SHARD_INDEX", "value": "0"})
    assert reported(check_k8s(docs), "shard 0 of 2, expected 1 of 2")


# --- volumes the image's user (uid 10001) must be able to write ------------------------

def test_the_image_user_and_its_directories(dockerfile: str) -> None:
    assert image_user(dockerfile) == ("app", 10001)
    assert image_user(dockerfile.replace("USER app\n", "USER 10002:10002\n")) == ("10002", 10002)
    assert {"/data", "/models", "/checkpoints", "/state", "/var/cache/numba"} <= owned_dirs(
        dockerfile)
    assert "/app" not in owned_dirs(dockerfile)  # made, but root's (the source is read-only)


@pytest.mark.parametrize(
    ("old", "new", "needles"),
    [  # a compose volume path the Dockerfile does not create, or not for its user
        (" /checkpoints /state /var/cache/numba \\\n", " /state /var/cache/numba \\\n",
         ["service server-0: volume checkpoints at /checkpoints", "service server-1"]),
        ("chown app:app /data /models /checkpoints /state",
         "chown app:app /data /models /checkpoints", ["service worker: volume worker-state at "
                                                      "/state: the Dockerfile does not create"]),
        ("chown app:app", "chown root:root", ["service gen: volume data at /data",
                                             "service export: volume models at /models",
                                             "is root-owned and the service cannot write it"]),
    ],
)
def test_compose_volume_the_image_does_not_own_is_reported(
        compose: dict[str, Any], dockerfile: str, old: str, new: str,
        needles: list[str]) -> None:
    assert old in dockerfile
    broken = dockerfile.replace(old, new, 1)
    problems = check_compose(compose, image_dirs=owned_dirs(broken))
    for needle in needles:
        assert reported(problems, needle), problems


def test_compose_volume_moved_off_the_image_directories_is_reported(
        compose: dict[str, Any], image_dirs: set[str]) -> None:
    broken = _set(compose, "services/server-1/volumes", ["checkpoints:/ckpt"])
    broken = _set(broken, "services/server-1/environment/FTRL_PS_CHECKPOINT_DIR", "/ckpt")
    problems = check_compose(broken, image_dirs=image_dirs)
    assert problems == ["compose service server-1: volume checkpoints at /ckpt: the "
                        "Dockerfile does not create /ckpt owned by the image's user; a fresh "
                        "named volume there is root-owned and the service cannot write it"]
    # a host folder (bind mount) is the user's to prepare (docs/deployment.md)
    bound = _set(compose, "services/export/volumes/1", "./models:/srv/models")
    bound = _set(bound, "services/export/environment/FTRL_PS_MODEL", "/srv/models/m.ftrl")
    bound = _set(bound, "services/export/environment/FTRL_PS_METRICS_JSON", "/srv/models/m.json")
    assert check_compose(bound, image_dirs=image_dirs) == []


def test_dockerfile_numba_cache_not_owned_is_reported(dockerfile: str) -> None:
    broken = dockerfile.replace(" /state /var/cache/numba\n", " /state\n", 1)
    assert broken != dockerfile
    assert reported(check_dockerfile(broken), "NUMBA_CACHE_DIR /var/cache/numba",
                    "chown'ed to the USER app")


def _security(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    sc: dict[str, Any] = docs[_k8s(docs, kind, name)]["spec"]["template"]["spec"][
        "securityContext"]
    return sc


@pytest.mark.parametrize(
    ("kind", "name", "key", "value", "needle"),
    [
        ("StatefulSet", "ftrl-ps-server", "fsGroup", _DELETE,
         "StatefulSet ftrl-ps-server container server: mounts volume checkpoints writable at "
         "/checkpoints but the pod sets no securityContext.fsGroup"),
        ("Job", "ftrl-ps-worker", "fsGroup", _DELETE,
         "Job ftrl-ps-worker container worker: mounts volume state writable at /state"),
        ("Job", "ftrl-ps-export", "fsGroup", _DELETE, "volume models writable at /models"),
        ("Job", "ftrl-ps-gen", "fsGroup", _DELETE, "volume data writable at /data"),
        ("Deployment", "ftrl-ps-serve", "runAsUser", _DELETE,
         "ftrl-ps-serve container serve: set runAsNonRoot: true and a numeric runAsUser"),
        ("StatefulSet", "ftrl-ps-server", "runAsNonRoot", _DELETE, "numeric runAsUser (10001)"),
        ("Job", "ftrl-ps-worker", "runAsUser", 0, "numeric runAsUser (10001)"),
        ("Job", "ftrl-ps-worker", "runAsUser", 1000,
         "runAsUser 1000 is not the image's uid 10001"),
    ],
)
def test_k8s_pod_that_cannot_write_its_volumes_is_reported(
        k8s: list[dict[str, Any]], image_uid: int | None, kind: str, name: str, key: str,
        value: Any, needle: str) -> None:
    docs = copy.deepcopy(k8s)
    sc = _security(docs, kind, name)
    if value is _DELETE:
        del sc[key]
    else:
        sc[key] = value
    problems = check_k8s(docs, image_uid=image_uid)
    assert reported(problems, needle), problems


def test_k8s_read_only_and_scratch_volumes_need_no_fs_group(
        k8s: list[dict[str, Any]], image_uid: int | None) -> None:
    docs = copy.deepcopy(k8s)
    spec = docs[_k8s(docs, "Job", "ftrl-ps-worker")]["spec"]["template"]["spec"]
    del spec["securityContext"]["fsGroup"]
    state = next(v for v in spec["volumes"] if v["name"] == "state")
    state.pop("persistentVolumeClaim")
    state["emptyDir"] = {}  # world-writable: the kubelet makes it so
    assert check_k8s(docs, image_uid=image_uid) == []  # and /data is mounted read-only
