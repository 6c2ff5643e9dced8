"""Check Kubernetes manifests (deploy/k8s/*.yaml) against the API schemas, the
services and each other.

Every document is first validated against the Kubernetes API's JSON schemas
for :data:`KUBERNETES_VERSION` in strict mode (no unknown field anywhere) with
the ``kubernetes-validate`` package, which ships the schemas (no cluster and
no network needed). Each pod a workload creates is simulated: a StatefulSet pod gets its hostname
``<name>-<ordinal>``, a pod of an Indexed Job its ``JOB_COMPLETION_INDEX``,
every pod ``KUBERNETES_SERVICE_HOST``; secrets referenced by ``secretKeyRef``
are looked up in the Secret manifests. The service then loads its options
from that environment (:func:`tools.deploycheck.launch.launch`) and the
workloads must agree with each other.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tools.deploycheck.launch import Launch, launch, server_urls, start_order_problems

__all__ = ["KUBERNETES_VERSION", "check_k8s", "pod_instances", "schema_problems",
           "security_problems"]

#: the Kubernetes API version the manifests are validated against (strict)
KUBERNETES_VERSION = "1.32.0"

WORKLOADS = ("StatefulSet", "Job", "Deployment", "DaemonSet", "Pod")


def _name(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("name", "?"))


def _pod(doc: Mapping[str, Any]) -> dict[str, Any]:
    if doc.get("kind") == "Pod":
        return dict(doc.get("spec") or {})
    return dict(((doc.get("spec") or {}).get("template") or {}).get("spec") or {})


def pod_instances(doc: Mapping[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """``(label, environment Kubernetes adds)`` for every pod the workload creates."""
    name, spec = _name(doc), doc.get("spec") or {}
    base = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    if doc.get("kind") == "StatefulSet":
        return [(f"pod {name}-{i}", {**base, "HOSTNAME": f"{name}-{i}"})
                for i in range(int(spec.get("replicas", 1)))]
    if doc.get("kind") == "Job" and spec.get("completionMode") == "Indexed":
        return [(f"index {i}", {**base, "HOSTNAME": f"{name}-{i}-x7k2p",
                                "JOB_COMPLETION_INDEX": str(i)})
                for i in range(int(spec.get("completions", 1)))]
    return [("pod", {**base, "HOSTNAME": f"{name}-x7k2p"})]


def _secrets(docs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    out = {}
    for doc in docs:
        if doc.get("kind") == "Secret":
            for key, value in (doc.get("stringData") or {}).items():
                out[(_name(doc), key)] = str(value)
            for key, value in (doc.get("data") or {}).items():
                out[(_name(doc), key)] = base64.b64decode(str(value)).decode()
    return out


def _container_env(where: str, container: Mapping[str, Any],
                   secrets: Mapping[tuple[str, str], str], problems: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    if container.get("envFrom"):
        problems.append(f"{where}: envFrom hides the variables from this check; use env")
    for item in container.get("env") or []:
        name, source = str(item.get("name")), item.get("valueFrom") or {}
        if "value" in item:
            env[name] = str(item["value"])
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            key = (str(ref.get("name")), str(ref.get("key")))
            if key not in secrets:
                problems.append(f"{where}: {name} refers to a missing secret key {key}")
            env[name] = secrets.get(key, "<secret>")
        else:
            env[name] = f"<{name}>"  # fieldRef, configMapKeyRef...: some non-empty value
    return env


def _mount_of(path: str, container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    best = None
    for m in container.get("volumeMounts") or []:
        target = str(m.get("mountPath", "")).rstrip("/")
        if (path == target or path.startswith(target + "/")) and (
            best is None or len(target) > len(str(best.get("mountPath")))
        ):
            best = m
    return best


def _check_pod_storage(where: str, pod: Mapping[str, Any], claims: set[str],
                       problems: list[str]) -> None:
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for v in volumes.values():
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim is not None and claim not in claims:
            problems.append(f"{where}: volume {v.get('name')} uses a missing PVC {claim}")
    for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                problems.append(f"{where}: container {c.get('name')} mounts an undefined "
                                f"volume {m.get('name')}")


#: volume types the kubelet makes writable for any user (or that are read-only anyway)
_NO_OWNER = ("emptyDir", "configMap", "secret", "projected", "downwardAPI")


def security_problems(where: str, pod: Mapping[str, Any], image_uid: int | None) -> list[str]:
    """Who the pod's containers run as, and whether that user can write its volumes.

    Every container must run as a numeric non-root ``runAsUser`` with
    ``runAsNonRoot`` (the kubelet cannot verify a USER given by name, and refuses
    to start it), the image's uid when known (the image's own writable
    directories, e.g. ``NUMBA_CACHE_DIR``, belong to it). A pod that mounts a
    volume writable (a PVC...) needs ``securityContext.fsGroup``: a fresh
    PersistentVolume is root-owned 755 and only ``fsGroup`` makes the kubelet give
    it to the pod's group.
    """
    problems = []
    pod_sc = pod.get("securityContext") or {}
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        sc = {**pod_sc, **(c.get("securityContext") or {})}
        uid, here = sc.get("runAsUser"), f"{where} container {c.get('name')}"
        if not isinstance(uid, int) or uid == 0 or sc.get("runAsNonRoot") is not True:
            problems.append(f"{here}: set runAsNonRoot: true and a numeric runAsUser "
                            f"({image_uid or 'the image uid'}) in its securityContext")
        elif image_uid is not None and uid != image_uid:
            problems.append(f"{here}: runAsUser {uid} is not the image's uid {image_uid}, "
                            "which owns the image's writable directories")
        for m in c.get("volumeMounts") or []:
            vol = volumes.get(m.get("name")) or {}
            if m.get("readOnly") or any(kind in vol for kind in _NO_OWNER):
                continue
            if pod_sc.get("fsGroup") is None:
                problems.append(
                    f"{here}: mounts volume {m.get('name')} writable at {m.get('mountPath')} "
                    "but the pod sets no securityContext.fsGroup: a fresh PersistentVolume "
                    f"is root-owned (755) and uid {uid} cannot write it")
    return problems


def _check_paths(where: str, la: Launch, container: Mapping[str, Any], pod: Mapping[str, Any],
                 problems: list[str]) -> str | None:
    """Files must be on mounted volumes (written ones not read-only); the data claim."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    claim = None
    reads = {"worker": ["input"], "export": ["test"]}.get(la.module, [])
    writes = {"export": ["model", "metrics_json"], "gen": ["outdir"],
              "server": ["checkpoint_dir"], "worker": ["state_dir"]}.get(la.module, [])
    for attr in reads + writes:
        path = getattr(la.options, attr, None)
        if not path or path == "-":
            continue
        mount = _mount_of(str(path), container)
        if mount is None:
            problems.append(f"{where}: {path} is on no mounted volume")
            continue
        if attr in writes and mount.get("readOnly"):
            problems.append(f"{where}: {path} is written but mounted read-only")
        if attr in ("input", "outdir"):
            vol = volumes.get(mount.get("name")) or {}
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
    return claim


def schema_problems(docs: Sequence[Mapping[str, Any]],
                    version: str = KUBERNETES_VERSION) -> list[str]:
    """Where the documents break the Kubernetes API schemas of ``version`` (strict:
    unknown fields are errors; a kind or apiVersion without a schema too)."""
    import kubernetes_validate

    problems = []
    for doc in docs:
        where = f"k8s {doc.get('kind', '?')} {_name(doc)}"
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(doc.get("kind"), str):
            problems.append(f"{where}: no apiVersion/kind")
            continue
        try:
            kubernetes_validate.validate(dict(doc), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path) or "(top level)"
            problems.append(f"{where}: not valid Kubernetes {exc.version} (strict): "
                            f"{path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(f"{where}: {exc.message}")
    return problems


def _init_waits(pod: Mapping[str, Any]) -> set[str]:
    """Services an init container of the pod waits for (``services.wait X``)."""
    out = set()
    for c in pod.get("initContainers") or []:
        cmd = [str(x) for x in c.get("command") or []]
        if cmd[1:3] == ["-m", "services.wait"] and len(cmd) > 3:
            out.add(cmd[3])
    return out


def check_k8s(docs: Sequence[Mapping[str, Any]], image_uid: int | None = None) -> list[str]:
    """Problems of a set of parsed manifests (all documents of deploy/k8s); ``image_uid``:
    the uid of the image's USER (:func:`tools.deploycheck.docker.image_user`)."""
    docs = [d for d in docs if d]
    problems = schema_problems(docs)
    secrets = _secrets(docs)
    claims = {_name(d) for d in docs if d.get("kind") == "PersistentVolumeClaim"}
    found: list[tuple[Mapping[str, Any], str, dict[str, str], Launch]] = []
    data_claims: dict[str, set[str | None]] = {"worker": set(), "gen": set()}
    for doc in docs:
        if doc.get("kind") not in WORKLOADS:
            continue
        pod = _pod(doc)
        where_doc = f"k8s {doc['kind']} {_name(doc)}"
        _check_pod_storage(where_doc, pod, claims, problems)
        problems += security_problems(where_doc, pod, image_uid)
        mains = {c.get("name"): c for c in pod.get("containers") or []}
        for label, added in pod_instances(doc):
            for c in [*(pod.get("initContainers") or []), *mains.values()]:
                where = f"{where_doc} container {c.get('name')} ({label})"
                env = _container_env(where, c, secrets, problems)
                la = launch(where, c.get("command") or [], {**env, **added}, problems)
                if la is None:
                    continue
                found.append((doc, label, env, la))
                if la.waits_for and not any(m.get("env") == c.get("env") for m in mains.values()):
                    problems.append(f"{where}: its env differs from the main container's")
                problems += start_order_problems(la, init_wait=la.module in _init_waits(pod))
                if not la.waits_for:
                    claim = _check_paths(where, la, c, pod, problems)
                    if la.module in data_claims:
                        data_claims[la.module].add(claim)
    if data_claims["gen"] and data_claims["worker"] != data_claims["gen"]:
        problems.append(f"k8s: workers read claim(s) {data_claims['worker']}, gen writes "
                        f"{data_claims['gen']}")
    problems += _check_topology(docs, found)
    return problems


def _check_topology(docs: Sequence[Mapping[str, Any]],
                    found: Sequence[tuple[Mapping[str, Any], str, dict[str, str], Launch]]
                    ) -> list[str]:
    problems: list[str] = []
    servers = [(d, la) for d, _l, _e, la in found if la.module == "server"]
    sets = {_name(d): d for d, _la in servers if d.get("kind") == "StatefulSet"}
    if len(sets) != 1 or len(sets) != len({_name(d) for d, _la in servers}):
        problems.append(f"k8s: the servers must be one StatefulSet, got {sorted(sets)}")
        return problems
    sts = next(iter(sets.values()))
    sts_name, replicas = _name(sts), int(sts["spec"].get("replicas", 1))
    port = servers[0][1].options.port
    for i, (_d, la) in enumerate(servers):
        if la.options.shard_index != i or la.options.num_shards != replicas:
            problems.append(f"{la.where}: shard {la.options.shard_index} of "
                            f"{la.options.num_shards}, expected {i} of {replicas} "
                            "(the pod ordinal)")
        if la.options.host in ("127.0.0.1", "localhost", "::1"):
            problems.append(f"{la.where}: binds {la.options.host}; other pods cannot reach it")
        if la.options.port != port:
            problems.append(f"{la.where}: port {la.options.port} differs from shard 0's {port}")
    problems += _check_server_pod(docs, sts, port)
    svc_name = str(sts["spec"].get("serviceName"))
    host = re.compile(rf"{re.escape(sts_name)}-(\d+)\.{re.escape(svc_name)}"
                      r"(\.[a-z0-9-]+(\.svc(\.cluster\.local)?)?)?")
    tokens = {la.options.token for _d, la in servers}
    expected_workers = {la.options.num_workers for _d, la in servers}
    if None in tokens or len(tokens) != 1:
        problems.append("k8s: every server needs the same token")
    problems += _check_serve(docs, found)
    for doc, label, _env, la in found:
        if la.module not in ("worker", "export", "serve") or (
                la.module == "serve" and not la.options.server):
            continue
        urls = server_urls(la.options)
        if len(urls) != replicas:
            problems.append(f"{la.where}: {len(urls)} server URL(s) for {replicas} shards")
        for i, (name, url_port) in enumerate(urls):
            m = host.fullmatch(name)
            if m is None or int(m.group(1)) != i or url_port != port:
                problems.append(f"{la.where}: shard {i} URL {name}:{url_port} is not "
                                f"{sts_name}-{i}.{svc_name}:{port}")
        if la.options.token not in tokens:
            problems.append(f"{la.where}: token differs from the servers'")
        if la.module == "worker":
            spec = doc.get("spec") or {}
            completions = int(spec.get("completions", 1))
            if spec.get("completionMode") != "Indexed" or doc.get("kind") != "Job":
                problems.append(f"{la.where}: workers must be an Indexed Job")
            if int(spec.get("parallelism", 1)) != completions:
                problems.append(f"{la.where}: parallelism must equal completions "
                                "(missing workers hold back the SSP clock)")
            if {la.options.num_workers} | (expected_workers - {None}) != {completions}:
                problems.append(f"{la.where}: FTRL_PS_NUM_WORKERS {la.options.num_workers} / "
                                f"servers' {expected_workers} != completions {completions}")
            if label.startswith("index ") and str(la.options.worker_index) != label[6:]:
                problems.append(f"{la.where}: worker index {la.options.worker_index} is not the "
                                f"completion index {label[6:]}")
    return problems


def _check_serve(docs: Sequence[Mapping[str, Any]],
                 found: Sequence[tuple[Mapping[str, Any], str, dict[str, str], Launch]]
                 ) -> list[str]:
    """The prediction service: a Deployment, probed on /ready and /health, behind a Service."""
    problems: list[str] = []
    serves = {_name(d): (d, la) for d, _l, _e, la in found
              if la.module == "serve" and not la.waits_for}
    if not serves:
        return ["k8s: no prediction service (python -m services.serve)"]
    for name, (doc, la) in serves.items():
        where = f"k8s {doc.get('kind')} {name}"
        if doc.get("kind") != "Deployment":
            problems.append(f"{where}: the prediction service should be a Deployment")
        port = la.options.port
        if la.options.host in ("127.0.0.1", "localhost", "::1"):
            problems.append(f"{where}: binds {la.options.host}; other pods cannot reach it")
        if la.options.learn and la.options.token is None:
            problems.append(f"{where}: learns without FTRL_PS_TOKEN")
        container = next(c for c in _pod(doc).get("containers") or []
                         if "services.serve" in (c.get("command") or []))
        named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
        if port not in named.values():
            problems.append(f"{where}: no containerPort {port}")
        for probe_name, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
            probe = (container.get(probe_name) or {}).get("httpGet") or {}
            if probe.get("path") != path or named.get(probe.get("port"),
                                                      probe.get("port")) != port:
                problems.append(f"{where}: {probe_name} must GET {path} on port {port}")
        # it waits for the shards before it listens: the probes must not kill it first
        first = container.get("startupProbe") or container.get("livenessProbe")
        if first and _probe_grace(first) < la.options.start_timeout:
            problems.append(f"{where}: waits up to {la.options.start_timeout:g} s for the "
                            f"shards before it listens, but its probes kill it after "
                            f"{_probe_grace(first):g} s: give it a startupProbe on /health "
                            "that allows FTRL_PS_START_TIMEOUT")
        labels = ((doc["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        fronts = [d for d in docs if d.get("kind") == "Service" and (sel := (
            d.get("spec") or {}).get("selector") or {}) and all(
            labels.get(k) == v for k, v in sel.items())]
        if not any(named.get(p.get("targetPort"), p.get("targetPort")) == port
                   for d in fronts for p in (d.get("spec") or {}).get("ports") or []):
            problems.append(f"{where}: no Service selects its pods with a port to {port}")
    return problems


def _probe_grace(probe: Mapping[str, Any]) -> float:
    """Seconds a container that does not answer gets before ``probe`` fails it
    (Kubernetes' defaults: period 10 s, 3 failures)."""
    return float(probe.get("initialDelaySeconds", 0)) + float(
        probe.get("periodSeconds", 10)) * float(probe.get("failureThreshold", 3))


def _check_server_pod(docs: Sequence[Mapping[str, Any]], sts: Mapping[str, Any],
                      port: int) -> list[str]:
    """Container port, readiness probe and the headless Service of the StatefulSet."""
    problems: list[str] = []
    where = f"k8s StatefulSet {_name(sts)}"
    labels = ((sts["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    container = next(c for c in _pod(sts).get("containers") or []
                     if "services.server" in (c.get("command") or []))
    named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    if port not in named.values():
        problems.append(f"{where}: no containerPort {port}")
    probe = (container.get("readinessProbe") or {}).get("httpGet") or {}
    if probe.get("path") != "/health" or named.get(probe.get("port"), probe.get("port")) != port:
        problems.append(f"{where}: readinessProbe must GET /health on port {port}")
    svc_name = sts["spec"].get("serviceName")
    svc = next((d for d in docs if d.get("kind") == "Service" and _name(d) == svc_name), None)
    if svc is None:
        return [*problems, f"{where}: serviceName {svc_name} names no Service"]
    spec = svc.get("spec") or {}
    if spec.get("clusterIP") != "None":
        problems.append(f"k8s Service {svc_name}: must be headless (clusterIP: None)")
    selector = spec.get("selector") or {}
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        problems.append(f"k8s Service {svc_name}: selector {selector} does not match the "
                        f"server pods' labels {labels}")
    if not any(p.get("port") == port and named.get(p.get("targetPort"), p.get("targetPort",
               port)) == port for p in spec.get("ports") or []):
        problems.append(f"k8s Service {svc_name}: no port {port} -> container port {port}")
    return problems
