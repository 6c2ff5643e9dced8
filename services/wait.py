"""``python -m services.wait SERVICE``: wait until a service can start (e.g. an init container).

Reads the same ``FTRL_PS_*`` environment as ``services.SERVICE`` (so the
configuration is checked before anything runs), then waits until every
server URL of its ``server`` option answers ``GET /health`` and its ``input``
/ ``test`` files exist (a directory or glob: has a file), with
:func:`ftrl_ps.ps.waiting.wait_until_ready` (the wait ``services.worker`` and
``services.export`` do themselves before they start). Exit 0 when ready, 1 on
timeout, 2 on a bad configuration.

For example in a shell script, before something that needs the servers::

    python -m services.wait worker --timeout 600 && ...
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ftrl_ps.errors import ConfigError, StartupTimeoutError
from ftrl_ps.ps.waiting import wait_until_ready
from services import SERVICE_MODULES
from services._common import Service

__all__ = ["main", "prerequisites"]


def prerequisites(options: Any) -> tuple[list[str], list[str]]:
    """``(server URLs, files)`` a service with ``options`` needs (its ``server``,
    ``input`` and ``test`` attributes, where present).

    >>> from types import SimpleNamespace
    >>> prerequisites(SimpleNamespace(server="http://a:1, http://b:2", input="x.svm"))
    (['http://a:1', 'http://b:2'], ['x.svm'])
    """
    urls = [u.strip() for u in (getattr(options, "server", None) or "").split(",") if u.strip()]
    files = [p for p in (getattr(options, n, None) for n in ("input", "test")) if p]
    return urls, files


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
    urls, files = prerequisites(options)
    try:
        wait_until_ready(urls, [], inputs=files, timeout=args.timeout, who="services.wait")
    except StartupTimeoutError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"services.wait: services.{args.service} can start", file=sys.stderr)
    return 0

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
