"""``python -m ftrl_ps.cluster.child ROLE JSON``: one exec'd cluster process.

The fallback of :class:`ftrl_ps.cluster.launch.Launcher` where it cannot fork:
a fresh interpreter runs one role (see :mod:`ftrl_ps.cluster.roles`) with
options given as JSON. Exit code 2 (:data:`USAGE_ERROR`) for bad options, 3
(:data:`DATA_ERROR`) for bad input data (a malformed line, a part that cannot
be opened or read), 1 for any other ftrl-ps error (its message on stderr, no
traceback). The supervisor restarts a worker only for the last: a new process
would fail the same way on the first two (:mod:`ftrl_ps.cluster.supervise`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from ftrl_ps.errors import ConfigError, DataError, FTRLPSError, InputIOError
from ftrl_ps.learn.logs import say, setup_logging

__all__ = ["DATA_ERROR", "USAGE_ERROR", "main", "run_role"]

log = logging.getLogger("ftrl_ps.cluster")

#: a child's exit code for bad flags or input (argparse's and ConfigError's)
USAGE_ERROR = 2
#: a child's exit code for bad input data (DataError, ParseError): not restarted either
DATA_ERROR = 3


def run_role(options: Any) -> int:
    """Run the role of ``options`` in this process, as a child does; the exit code."""
    import ftrl_ps._kernels
    from ftrl_ps.cluster.roles import role_of

    ftrl_ps._kernels.SKIP_BLAS_PROBE = True  # see ftrl_ps._kernels._config
    role = role_of(options)
    index = getattr(options, "shard_index" if role.name == "server" else "worker_index", None)
    setup_logging(role.name if index is None else f"{role.name}-{index}",
                  level=getattr(options, "log_level", None))
    try:
        return role.run(options)
    except ConfigError as exc:
        log.error("error: %s", exc)
        return USAGE_ERROR
    except InputIOError as exc:  # a retry may cure it: restarted, as for a crash
        log.error("error: %s", exc)
        return 1
    except DataError as exc:
        log.error("error: %s", exc)
        return DATA_ERROR
    except FTRLPSError as exc:
        log.error("error: %s", exc)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the role named in ``argv`` with its JSON options; the exit code."""
    from ftrl_ps.cluster.roles import options_from_json

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        return _usage_error("usage: python -m ftrl_ps.cluster.child ROLE OPTIONS_JSON")
    try:
        options = options_from_json(args[0], args[1])
    except ConfigError as exc:
        return _usage_error(f"error: {exc}", args[0])
    return run_role(options)


def _usage_error(message: str, role: str = "child") -> int:
    """Say ``message`` in the format of ``$FTRL_PS_LOG_FORMAT``; exit code 2."""
    with contextlib.suppress(ConfigError):  # a bad format: the text one
        setup_logging(role)
    say(log, message, level=logging.ERROR, prefix="" if role == "child" else f"ftrl-ps {role}: ")
    return USAGE_ERROR


if __name__ == "__main__":  # pragma: no cover
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown (numba's takes ~0.4 s)
