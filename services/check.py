"""Check deployment files against the real ``ftrl-ps`` parser.

Every container that runs ``python -m services.<name>`` gets the argv the
service would build from its ``FTRL_PS_*`` environment, and that argv is
parsed by :func:`ftrl_ps.cli.build_parser`: a misspelt variable, a bad value
or a flag that no longer exists is reported. Then the topology is checked:
shard indices, ports and the server URLs of workers and export, tokens,
worker counts, health-gated start-up and shared data volumes.

    python -m services.check            # docker-compose.yml, Dockerfile, deploy/k8s/*.yaml

Each ``check_*`` function returns a list of problems (empty = consistent).
The Dockerfile is checked by :mod:`services.check_docker`, Kubernetes
manifests by :mod:`services.check_k8s`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ftrl_ps.errors import ConfigError
from services import SERVICE_MODULES
from services.env import Service, masked

__all__ = [
    "ROOT",
    "Launch",
    "check_compose",
    "interpolate",
    "launch",
    "parse_cli",
    "server_urls",
]

ROOT = Path(__file__).resolve().parents[1]
_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_]\w*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_]\w*))")


def parse_cli(argv: Sequence[str]) -> tuple[argparse.Namespace | None, str]:
    """``(namespace, "")`` if the real parser accepts ``argv``, else ``(None, error)``."""
    from ftrl_ps.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(list(argv)), ""
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return None, lines[-1] if lines else "rejected by the parser"


@dataclass
class Launch:
    """What one container runs: ``services.<module>`` -> ``ftrl-ps <command>``."""

    where: str
    module: str
    waits_for: bool
    argv: list[str]
    args: argparse.Namespace

    @property
    def command(self) -> str:
        return self.argv[0]


def launch(
    where: str, command: Sequence[str], env: Mapping[str, str], problems: list[str]
) -> Launch | None:
    """Resolve a container command ``python -m services.X [...]`` with its env.

    ``python -m services.wait X`` (an init container) is checked as service X.
    Appends to ``problems`` and returns None when something is wrong.
    """
    cmd = [str(c) for c in command]
    if cmd[:2] != ["python", "-m"] or len(cmd) < 3 or not cmd[2].startswith("services."):
        problems.append(f"{where}: command {cmd} is not 'python -m services.<name>'")
        return None
    module, rest, waits = cmd[2].removeprefix("services."), cmd[3:], False
    if module == "wait":
        if not rest or rest[0] not in SERVICE_MODULES:
            problems.append(f"{where}: services.wait needs a service name, got {rest}")
            return None
        module, rest, waits = rest[0], [], True
    if module not in SERVICE_MODULES:
        problems.append(f"{where}: no service module services.{module}")
        return None
    service: Service = importlib.import_module(f"services.{module}").SERVICE
    try:
        argv = service.argv(rest, env)
    except ConfigError as exc:
        problems.append(f"{where}: {exc}")
        return None
    args, error = parse_cli(argv)
    if args is None:
        problems.append(f"{where}: ftrl-ps {masked(argv)}: {error}")
        return None
    return Launch(where, module, waits, argv, args)


def server_urls(args: argparse.Namespace) -> list[tuple[str, int | None]]:
    """``(host, port)`` of every ``--server`` URL, in shard order."""
    out = []
    for url in str(args.server).split(","):
        parts = urlsplit(url.strip())
        out.append((parts.hostname or "", parts.port))
    return out


# --- docker compose ----------------------------------------------------------------

def interpolate(value: Any, variables: Mapping[str, str], problems: list[str]) -> Any:
    """Compose-style ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``$$`` in
    every string of ``value``; a variable without default and unset is a problem."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables, problems) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables, problems) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name, op, arg = m.group(2) or m.group(5), m.group(3), m.group(4) or ""
        current = variables.get(name)
        if op == ":-":
            return current if current else arg
        if op == "-":
            return current if current is not None else arg
        if current is None or (op == ":?" and not current):
            problems.append(f"compose variable {name} is unset and has no default")
            return ""
        return current

    return _VAR.sub(sub, value)


def _env_dict(env: Any) -> dict[str, str]:
    if isinstance(env, list):
        pairs = [str(e).partition("=") for e in env]
        return {k: v for k, _, v in pairs}
    return {str(k): "" if v is None else str(v) for k, v in (env or {}).items()}


def _int(text: str | None) -> int | str | None:
    try:
        return int(str(text))
    except ValueError:
        return text


def _mounts(svc: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    out = []
    for vol in svc.get("volumes") or []:
        if isinstance(vol, str):
            parts = vol.split(":")
            out.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
        else:
            out.append((str(vol.get("source")), str(vol.get("target")), bool(vol.get("read_only"))))
    return out


def _source_of(path: str, mounts: list[tuple[str, str, bool]]) -> tuple[str, bool] | None:
    best = None
    for source, target, ro in mounts:
        if (path == target or path.startswith(target.rstrip("/") + "/")) and (
            best is None or len(target) > len(best[0])
        ):
            best = (target, source, ro)
    return None if best is None else (best[1], best[2])


def check_compose(doc: Mapping[str, Any], variables: Mapping[str, str] | None = None) -> list[str]:
    """Problems of a parsed docker-compose document (``variables``: the shell/.env)."""
    problems: list[str] = []
    doc = interpolate(dict(doc), variables or {}, problems)
    services: dict[str, Any] = doc.get("services") or {}
    launches: dict[str, Launch] = {}
    for name, svc in services.items():
        found = launch(f"compose service {name}", svc.get("command") or [],
                       _env_dict(svc.get("environment")), problems)
        if found is not None:
            launches[name] = found
    servers = {n: la for n, la in launches.items() if la.module == "server"}
    workers = {n: la for n, la in launches.items() if la.module == "worker"}
    exports = {n: la for n, la in launches.items() if la.module == "export"}
    gens = {n: la for n, la in launches.items() if la.module == "gen"}
    for role, group in (("server", servers), ("worker", workers), ("export", exports)):
        if not group:
            problems.append(f"compose: no (valid) {role} service among {sorted(services)}")
    if not servers:
        return problems
    shards = {la.args.shard_index: n for n, la in servers.items()}
    num_shards = {la.args.num_shards for la in servers.values()}
    if len(num_shards) != 1 or sorted(shards) != list(range(len(servers))) or (
            num_shards != {len(servers)}):
        problems.append(f"compose: server shard indices {sorted(shards)} / --num-shards "
                        f"{sorted(num_shards)} do not describe {len(servers)} shards")
    for key in ("bits", "group_size", "staleness", "num_workers", "token"):
        if len({repr(getattr(la.args, key)) for la in servers.values()}) > 1:
            problems.append(f"compose: servers disagree on --{key.replace('_', '-')}")
    tokens = {la.args.token for la in servers.values()}
    for name, la in servers.items():
        if la.args.host in ("127.0.0.1", "localhost", "::1"):
            problems.append(f"compose service {name}: binds {la.args.host}, unreachable "
                            "from other containers")
        if la.args.token is None:
            problems.append(f"compose service {name}: no FTRL_PS_TOKEN")
        health = services[name].get("healthcheck") or {}
        test = " ".join(str(t) for t in health.get("test") or [])
        if health.get("disable") or f":{la.args.port}/health" not in test:
            problems.append(f"compose service {name}: healthcheck must GET "
                            f":{la.args.port}/health")
    for name, la in {**workers, **exports}.items():
        urls = server_urls(la.args)
        if len(urls) != len(servers):
            problems.append(f"compose service {name}: {len(urls)} server URL(s) for "
                            f"{len(servers)} shards")
        for i, (host, port) in enumerate(urls):
            target = shards.get(i)
            if target is None or host != target or port != servers[target].args.port:
                want = f"{target}:{servers[target].args.port}" if target else "?"
                problems.append(f"compose service {name}: shard {i} URL {host}:{port} "
                                f"is not {want}")
        if la.args.token not in tokens or la.args.token is None:
            problems.append(f"compose service {name}: token differs from the servers'")
        deps = services[name].get("depends_on") or {}
        for server in servers:
            cond = (deps.get(server) or {}).get("condition") if isinstance(deps, dict) else None
            if cond != "service_healthy":
                problems.append(f"compose service {name}: must depend on {server} "
                                "with condition service_healthy")
        for gen in gens:
            cond = (deps.get(gen) or {}).get("condition") if isinstance(deps, dict) else None
            if cond != "service_completed_successfully":
                problems.append(f"compose service {name}: must depend on {gen} "
                                "with condition service_completed_successfully")
    worker_services = [n for n, svc in services.items()
                       if "services.worker" in [str(c) for c in svc.get("command") or []]]
    for name in worker_services:  # also when the worker's env failed to parse
        svc, parsed = services[name], workers.get(name)
        env = _env_dict(svc.get("environment"))
        replicas = int((svc.get("deploy") or {}).get("replicas", svc.get("scale", 1)))
        counts = {s.args.num_workers for s in servers.values()}
        counts |= {parsed.args.num_workers if parsed else _int(env.get("FTRL_PS_NUM_WORKERS"))}
        if counts != {replicas}:
            problems.append(f"compose service {name}: {replicas} replicas but --num-workers "
                            f"{sorted(counts, key=str)}")
        if replicas > 1 and env.get("FTRL_PS_WORKER_INDEX") != "auto":
            problems.append(f"compose service {name}: replicas need FTRL_PS_WORKER_INDEX=auto")
        if svc.get("restart") != "on-failure":
            problems.append(f"compose service {name}: restart should be on-failure")
    problems += _check_compose_data(services, gens, workers, exports)
    return problems


def _check_compose_data(services: Mapping[str, Any], gens: Mapping[str, Launch],
                        workers: Mapping[str, Launch], exports: Mapping[str, Launch]) -> list[str]:
    problems = []
    gen_sources = {}
    for name, la in gens.items():
        src = _source_of(la.args.outdir, _mounts(services[name]))
        if src is None or src[1]:
            problems.append(f"compose service {name}: output {la.args.outdir} is not on a "
                            "writable volume")
        else:
            gen_sources[name] = src[0]
    for name, la in {**workers, **exports}.items():
        mounts = _mounts(services[name])
        paths = [la.args.input] if la.module == "worker" else [la.args.test]
        for path in filter(None, paths):
            src = _source_of(path, mounts)
            if src is None:
                problems.append(f"compose service {name}: {path} is on no volume")
            elif gen_sources and src[0] not in gen_sources.values():
                problems.append(f"compose service {name}: {path} is not on gen's volume")
        if la.module == "export":
            src = _source_of(la.args.model, mounts)
            if src is None or src[1]:
                problems.append(f"compose service {name}: model {la.args.model} is not on a "
                                "writable volume")
    inputs = {_env_dict(svc.get("environment")).get("FTRL_PS_INPUT") for svc in
              services.values() if "services.worker" in [str(c) for c in svc.get("command", [])]}
    for gname in gens:
        skip = _env_dict(services[gname].get("environment")).get("FTRL_PS_SKIP_IF_EXISTS")
        if inputs != {skip}:
            problems.append(f"compose service {gname}: FTRL_PS_SKIP_IF_EXISTS {skip} is not "
                            f"the workers' input {sorted(map(str, inputs))}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Check docker-compose.yml, Dockerfile and deploy/k8s/*.yaml of the repository."""
    import yaml

    from services.check_docker import check_dockerfile
    from services.check_k8s import check_k8s

    root = Path(argv[0]) if argv else ROOT
    problems = check_dockerfile((root / "Dockerfile").read_text(), root)
    problems += check_compose(yaml.safe_load((root / "docker-compose.yml").read_text()))
    docs = []
    for path in sorted((root / "deploy" / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    problems += check_k8s(docs)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
