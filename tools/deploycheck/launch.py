"""What one container runs: ``python -m services.X`` + its environment -> options.

:func:`launch` loads a container's options exactly as the service would
(:meth:`services._common.Service.load`), so every check works on typed
options; :func:`parse_cli` checks an ``ftrl-ps`` command line (e.g. the
Dockerfile's build-time commands) with the real parser.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ftrl_ps.errors import ConfigError
from services import SERVICE_MODULES
from services._common import Service

__all__ = ["ROOT", "Launch", "launch", "parse_cli", "server_urls", "start_order_problems"]

ROOT = Path(__file__).resolve().parents[2]


def parse_cli(argv: Sequence[str]) -> str:
    """``""`` if ``ftrl-ps``'s parser accepts ``argv``, else its error line."""
    from ftrl_ps.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(list(argv))
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else "rejected by the parser"
    return ""


@dataclass
class Launch:
    """One container: ``services.<module>`` and the options it would run with.

    Attributes
    ----------
    where : str
        Where it is described, for messages.
    module : str
        The service module (``services.wait X`` counts as X).
    waits_for : bool
        True for ``services.wait X`` (an init container).
    options : object
        The role's options dataclass (``ShardOptions``, ``WorkerOptions``, ...).
    """

    where: str
    module: str
    waits_for: bool
    options: Any


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
        options = service.load(rest, env)
    except ConfigError as exc:
        problems.append(f"{where}: {exc}")
        return None
    return Launch(where, module, waits, options)


def server_urls(options: Any) -> list[tuple[str, int | None]]:
    """``(host, port)`` of every URL of ``options.server``, in shard order."""
    out = []
    for url in str(options.server).split(","):
        parts = urlsplit(url.strip())
        out.append((parts.hostname or "", parts.port))
    return out


def start_order_problems(la: Launch, *, init_wait: bool = False) -> list[str]:
    """Why the container ``la`` would fail or lie when started before what it needs.

    Containers start in any order (Kubernetes has no ordering; podman-compose
    does not enforce ``depends_on`` conditions): a worker, an export or a
    prediction service must wait for the servers and its files itself
    (``FTRL_PS_START_TIMEOUT`` > 0) unless an init container (``init_wait``)
    does; an export must wait for the workers and not accept an incomplete run.
    """
    if la.module not in ("worker", "export", "serve") or la.waits_for:
        return []
    problems = []
    if not init_wait and not la.options.start_timeout > 0:
        problems.append(f"{la.where}: FTRL_PS_START_TIMEOUT is 0 and nothing else waits: it "
                        "fails when it starts before the servers or the data")
    if la.module == "export":
        if not la.options.wait:
            problems.append(f"{la.where}: export should wait for the workers (FTRL_PS_WAIT=1)")
        if la.options.allow_incomplete:
            problems.append(f"{la.where}: FTRL_PS_ALLOW_INCOMPLETE would save a model of an "
                            "incomplete run as if it were finished")
    return problems
