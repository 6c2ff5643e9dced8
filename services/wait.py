"""``python -m services.wait SERVICE``: wait until a service can start (an init container).

Reads the same ``FTRL_PS_*`` environment as ``services.SERVICE`` (so the
configuration is checked before anything runs), then waits until every
server URL of its ``server`` option answers ``GET /health`` and its ``input``
/ ``test`` files exist. Exit 0 when ready, 1 on timeout, 2 on a bad
configuration.

Kubernetes use (an init container of the worker Job, same env as the worker)::

    command: ["python", "-m", "services.wait", "worker", "--timeout", "600"]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from ftrl_ps.errors import ConfigError
from services import SERVICE_MODULES
from services._common import Service

__all__ = ["main", "missing", "wait_for"]


def missing(options: Any, *, timeout: float = 2.0) -> list[str]:
    """What a service with ``options`` still waits for: unreachable health URLs
    and absent files (``server``, ``input``, ``test`` attributes, where present)."""
    out = []
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # cluster-internal
    urls = [u.strip() for u in (getattr(options, "server", None) or "").split(",") if u.strip()]
    for url in urls:
        health = url.rstrip("/") + "/health"
        try:
            with opener.open(health, timeout=timeout) as resp:
                if resp.status != 200:
                    out.append(f"{health} (HTTP {resp.status})")
        except OSError as exc:
            out.append(f"{health} ({getattr(exc, 'reason', exc)})")
    for name in ("input", "test"):
        path = getattr(options, name, None)
        if path and path != "-" and not os.path.exists(path):
            out.append(path)
    return out


def wait_for(options: Any, timeout: float, interval: float = 1.0) -> list[str]:
    """Poll :func:`missing` until it is empty or ``timeout`` s pass; the last list."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        todo = missing(options)
        if not todo or time.monotonic() >= deadline:
            return todo
        if ", ".join(todo) != last:
            last = ", ".join(todo)
            print(f"services.wait: waiting for {last}", file=sys.stderr, flush=True)
        time.sleep(interval)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Check SERVICE's configuration and wait for what it needs; the exit code."""
    parser = argparse.ArgumentParser(prog="python -m services.wait", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("service", choices=SERVICE_MODULES, help="the service to wait for")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="give up after this many seconds (default 600)")
    args = parser.parse_args(argv)
    service: Service = importlib.import_module(f"services.{args.service}").SERVICE
    try:
        options = service.load([], environ)
    except ConfigError as exc:
        print(f"services.wait: bad configuration for services.{args.service}: {exc}",
              file=sys.stderr)
        return 2
    todo = wait_for(options, args.timeout)
    if todo:
        print(f"services.wait: still waiting after {args.timeout:g} s for {', '.join(todo)}",
              file=sys.stderr)
        return 1
    print(f"services.wait: services.{args.service} can start", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
