"""Check a parsed ``docker-compose.yml``: every service's options and the topology.

Compose-style ``${VAR:-default}`` interpolation is applied first (with the
variables a shell or ``.env`` would give); each service's command and
environment are then loaded as the service would (:func:`launch`), and the
servers, workers, export and gen must agree with each other.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from ftrl_ps.cluster.settings import env_name
from tools.deploycheck.launch import Launch, launch, server_urls, start_order_problems

__all__ = ["check_compose", "interpolate", "volume_owner_problems"]

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_]\w*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_]\w*))")


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


def _named_volume(source: str) -> bool:
    """A compose volume name, not a host path (``./x``, ``/x``, ``~/x``)."""
    return bool(source) and not source.startswith((".", "/", "~")) and "/" not in source


def volume_owner_problems(services: Mapping[str, Any], names: Collection[str],
                          image_dirs: Collection[str], user: str) -> list[str]:
    """Named volumes of the image's services mounted where the image has no directory
    owned by its user: Docker initialises a fresh named volume from the image's
    directory (owner and mode), else root-owned 755, unwritable by the user. (podman
    chowns a fresh volume to the container's user instead, so it hides this.)"""
    problems = []
    for name in names:
        for source, target, _ro in _mounts(services[name]):
            if _named_volume(source) and target.rstrip("/") not in image_dirs:
                problems.append(
                    f"compose service {name}: volume {source} at {target}: the Dockerfile does "
                    f"not create {target} owned by the image's user{user and f' {user}'}; a "
                    "fresh named volume there is root-owned and the service cannot write it")
    return problems


def check_compose(doc: Mapping[str, Any], variables: Mapping[str, str] | None = None, *,
                  image_dirs: Collection[str] | None = None, image_user: str = "") -> list[str]:
    """Problems of a parsed docker-compose document (``variables``: the shell/.env).

    ``image_dirs``: the directories the Dockerfile creates owned by its USER
    (:func:`tools.deploycheck.docker.owned_dirs`); given, every named volume a
    service of the image mounts must be at one of them.
    """
    problems: list[str] = []
    doc = interpolate(dict(doc), variables or {}, problems)
    services: dict[str, Any] = doc.get("services") or {}
    launches: dict[str, Launch] = {}
    for name, svc in services.items():
        if "monitoring" in (svc.get("profiles") or []):
            continue  # Prometheus / Grafana: tests/test_monitoring_files.py checks them
        found = launch(f"compose service {name}", svc.get("command") or [],
                       _env_dict(svc.get("environment")), problems)
        if found is not None:
            launches[name] = found
    servers = {n: la for n, la in launches.items() if la.module == "server"}
    workers = {n: la for n, la in launches.items() if la.module == "worker"}
    exports = {n: la for n, la in launches.items() if la.module == "export"}
    gens = {n: la for n, la in launches.items() if la.module == "gen"}
    serves = {n: la for n, la in launches.items() if la.module == "serve"}
    for role, group in (("server", servers), ("worker", workers), ("export", exports),
                        ("serve", serves)):
        if not group:
            problems.append(f"compose: no (valid) {role} service among {sorted(services)}")
    if not servers:
        return problems
    shards = {la.options.shard_index: n for n, la in servers.items()}
    num_shards = {la.options.num_shards for la in servers.values()}
    if len(num_shards) != 1 or sorted(shards) != list(range(len(servers))) or (
            num_shards != {len(servers)}):
        problems.append(f"compose: server shard indices {sorted(shards)} / FTRL_PS_NUM_SHARDS "
                        f"{sorted(num_shards)} do not describe {len(servers)} shards")
    for key in ("bits", "group_size", "staleness", "num_workers", "token"):
        if len({repr(getattr(la.options, key)) for la in servers.values()}) > 1:
            problems.append(f"compose: servers disagree on {env_name(key)}")
    tokens = {la.options.token for la in servers.values()}
    for name, la in servers.items():
        if la.options.host in ("127.0.0.1", "localhost", "::1"):
            problems.append(f"compose service {name}: binds {la.options.host}, unreachable "
                            "from other containers")
        if la.options.token is None:
            problems.append(f"compose service {name}: no FTRL_PS_TOKEN")
        if services[name].get("restart") not in ("on-failure", "always", "unless-stopped"):
            problems.append(f"compose service {name}: a killed shard must come back "
                            "(restart: on-failure)")
        if la.options.checkpoint_dir is None:
            problems.append(f"compose service {name}: no FTRL_PS_CHECKPOINT_DIR (a restarted "
                            "shard would start empty)")
        health = services[name].get("healthcheck") or {}
        test = " ".join(str(t) for t in health.get("test") or [])
        if health.get("disable") or f":{la.options.port}/health" not in test:
            problems.append(f"compose service {name}: healthcheck must GET "
                            f":{la.options.port}/health")
    problems += _check_serve(services, serves)
    for name, la in {**workers, **exports, **serves}.items():
        if la.module == "serve" and not la.options.server:
            continue  # serves a model file
        urls = server_urls(la.options)
        if len(urls) != len(servers):
            problems.append(f"compose service {name}: {len(urls)} server URL(s) for "
                            f"{len(servers)} shards")
        for i, (host, port) in enumerate(urls):
            target = shards.get(i)
            if target is None or host != target or port != servers[target].options.port:
                want = f"{target}:{servers[target].options.port}" if target else "?"
                problems.append(f"compose service {name}: shard {i} URL {host}:{port} "
                                f"is not {want}")
        if la.options.token not in tokens or la.options.token is None:
            problems.append(f"compose service {name}: token differs from the servers'")
        problems += start_order_problems(la)
        deps = services[name].get("depends_on") or {}
        if services[name].get("restart", "no") != "no":
            # podman-compose turns depends_on into `podman run --requires`, and podman
            # will not restart a container whose required ones are not running (gen has
            # exited by design; a server may be down too): a restarted worker would fail
            if deps:
                problems.append(f"compose service {name}: has a restart policy, so no "
                                "depends_on (podman cannot restart it: --requires)")
            continue
        for server in servers:
            cond = (deps.get(server) or {}).get("condition") if isinstance(deps, dict) else None
            if cond != "service_healthy":
                problems.append(f"compose service {name}: must depend on {server} "
                                "with condition service_healthy")
        for gen in gens if la.module != "serve" else ():
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
        counts = {s.options.num_workers for s in servers.values()}
        counts |= {parsed.options.num_workers if parsed else _int(env.get("FTRL_PS_NUM_WORKERS"))}
        if counts != {replicas}:
            problems.append(f"compose service {name}: {replicas} replicas but FTRL_PS_NUM_WORKERS "
                            f"{sorted(counts, key=str)}")
        if replicas > 1 and env.get("FTRL_PS_WORKER_INDEX") != "auto":
            problems.append(f"compose service {name}: replicas need FTRL_PS_WORKER_INDEX=auto")
        if "replicas" in (svc.get("deploy") or {}) and svc["deploy"].get("mode") != "replicated":
            problems.append(f"compose service {name}: deploy.replicas needs deploy.mode: "
                            "replicated (podman-compose starts one container otherwise)")
        if svc.get("restart") != "on-failure":
            problems.append(f"compose service {name}: restart should be on-failure")
    problems += _check_compose_data(services, gens, workers, exports, servers)
    problems += published_port_problems(services)
    if image_dirs is not None:
        problems += volume_owner_problems(services, launches, image_dirs, image_user)
    return problems


def published_port_problems(services: Mapping[str, Any]) -> list[str]:
    """A port published on every host interface: the project binds 127.0.0.1 by
    default, and Grafana in the compose file shows the dashboards to anyone."""
    problems = []
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            text = str(port.get("host_ip", "") if isinstance(port, Mapping) else port)
            if not text.startswith(("127.0.0.1:", "[::1]:")) and text != "127.0.0.1":
                problems.append(f"compose service {name}: port {port!r} is published on every "
                                "interface of the host; publish it on 127.0.0.1 (like "
                                "\"127.0.0.1:9090:9090\")")
    return problems


def _check_serve(services: Mapping[str, Any], serves: Mapping[str, Launch]) -> list[str]:
    """A prediction service: reachable, probed on /ready, learning only from the shards."""
    problems = []
    for name, la in serves.items():
        opts = la.options
        if opts.host in ("127.0.0.1", "localhost", "::1"):
            problems.append(f"compose service {name}: binds {opts.host}, unreachable")
        health = services[name].get("healthcheck") or {}
        test = " ".join(str(t) for t in health.get("test") or [])
        if health.get("disable") or f":{opts.port}/ready" not in test:
            problems.append(f"compose service {name}: healthcheck must GET :{opts.port}/ready")
        published = [str(p) for p in services[name].get("ports") or []]
        if published and not all(p.rsplit(":", 1)[-1] == str(opts.port) for p in published):
            problems.append(f"compose service {name}: ports {published} do not map to "
                            f"container port {opts.port}")
        if opts.learn and opts.token is None:
            problems.append(f"compose service {name}: learns without FTRL_PS_TOKEN")
    return problems


def _check_compose_data(services: Mapping[str, Any], gens: Mapping[str, Launch],
                        workers: Mapping[str, Launch], exports: Mapping[str, Launch],
                        servers: Mapping[str, Launch]) -> list[str]:
    problems = []
    gen_sources = {}
    for name, la in gens.items():
        src = _source_of(la.options.outdir, _mounts(services[name]))
        if src is None or src[1]:
            problems.append(f"compose service {name}: output {la.options.outdir} is not on a "
                            "writable volume")
        else:
            gen_sources[name] = src[0]
    for name, la in {**servers, **workers, **exports}.items():
        mounts = _mounts(services[name])
        attr = {"worker": "input", "export": "test"}.get(la.module)
        paths = [getattr(la.options, attr)] if attr else []
        for path in filter(None, paths):
            src = _source_of(path, mounts)
            if src is None:
                problems.append(f"compose service {name}: {path} is on no volume")
            elif gen_sources and src[0] not in gen_sources.values():
                problems.append(f"compose service {name}: {path} is not on gen's volume")
        written = [la.options.checkpoint_dir] if la.module == "server" and (
            la.options.checkpoint_dir) else []
        written += [la.options.state_dir] if la.module == "worker" and la.options.state_dir else []
        for path in written:
            src = _source_of(path, mounts)
            if src is None or src[1]:
                problems.append(f"compose service {name}: {path} is not on a writable volume")
        if la.module == "export":
            src = _source_of(la.options.model, mounts)
            if src is None or src[1]:
                problems.append(f"compose service {name}: model {la.options.model} is not on a "
                                "writable volume")
    inputs = {_env_dict(svc.get("environment")).get("FTRL_PS_INPUT") for svc in
              services.values() if "services.worker" in [str(c) for c in svc.get("command", [])]}
    for gname in gens:
        skip = _env_dict(services[gname].get("environment")).get("FTRL_PS_SKIP_IF_EXISTS")
        if inputs != {skip}:
            problems.append(f"compose service {gname}: FTRL_PS_SKIP_IF_EXISTS {skip} is not "
                            f"the workers' input {sorted(map(str, inputs))}")
    return problems
