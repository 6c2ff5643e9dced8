"""``python -m services.worker``: one training worker, configured by env.

The worker index must be given: ``FTRL_PS_WORKER_INDEX`` (a number, or
``auto``: the servers assign the lowest free index, so ``docker compose up
--scale worker=N`` works), else ``JOB_COMPLETION_INDEX`` (the index
Kubernetes gives each pod of an Indexed Job).

>>> opts = SERVICE.load([], {"FTRL_PS_SERVER": "http://s0:7000",
...                          "FTRL_PS_INPUT": "/data/train.svm",
...                          "FTRL_PS_NUM_WORKERS": "4", "JOB_COMPLETION_INDEX": "3"})
>>> opts.server, opts.input, opts.worker_index, opts.num_workers
('http://s0:7000', '/data/train.svm', 3, 4)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ftrl_ps.ps.worker_main import WorkerOptions, run_worker
from services._common import Service

__all__ = ["JOB_INDEX_ENV", "SERVICE", "main"]

JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _derive(environ: Mapping[str, str]) -> dict[str, Any]:
    index = environ.get(JOB_INDEX_ENV)
    return {"worker_index": index} if index else {}


SERVICE = Service(
    name="worker",
    command="worker",
    options=WorkerOptions,
    runner=run_worker,
    required=frozenset({"worker_index"}),
    derive=_derive,
    notes={
        "worker_index": "When unset: $JOB_COMPLETION_INDEX (Kubernetes Indexed Job); "
        "docker compose (--scale) sets 'auto'",
        "token": "Keep it in a Secret; the service never prints it",
    },
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Train this worker's share; the exit code."""
    return SERVICE.main(argv, environ)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
