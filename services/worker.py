"""``python -m services.worker``: one training worker, configured by env.

The worker index must be given: ``FTRL_PS_WORKER_INDEX`` (a number, or
``auto``: the servers assign the lowest free index, so the replicas of one
compose service need no index each), else ``JOB_COMPLETION_INDEX`` (the index
Kubernetes gives each pod of an Indexed Job). It waits up to
``FTRL_PS_START_TIMEOUT`` (service default 600 s) for its servers and its
input file, so it may start before them.

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

from ftrl_ps.cluster.signals import sigterm_as_interrupt
from ftrl_ps.ps.worker_main import WorkerOptions, run_worker
from services._common import START_TIMEOUT, Service

__all__ = ["JOB_INDEX_ENV", "SERVICE", "main"]

JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _derive(environ: Mapping[str, str]) -> dict[str, Any]:
    index = environ.get(JOB_INDEX_ENV)
    return {"worker_index": index} if index else {}


def _run(options: WorkerOptions) -> dict[str, Any]:
    """The worker; stopped by SIGTERM (docker stop, a pod's deletion), it leaves
    the cluster as for Ctrl-C, so the others need not wait for its timeout."""
    with sigterm_as_interrupt():
        return run_worker(options)


SERVICE = Service(
    name="worker",
    command="worker",
    options=WorkerOptions,
    runner=_run,
    defaults={"start_timeout": START_TIMEOUT},
    required=frozenset({"worker_index"}),
    derive=_derive,
    notes={
        "worker_index": "When unset: $JOB_COMPLETION_INDEX (Kubernetes Indexed Job); "
        "the compose file sets 'auto' (its worker replicas)",
        "token": "Keep it in a Secret; the service never prints it",
        "identity": "The compose file sets 'hostname': a restarted worker container "
        "takes back its index at once",
    },
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Train this worker's share; the exit code."""
    return SERVICE.main(argv, environ)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
