"""``python -m services.worker``: one training worker, configured by env.

An unset ``FTRL_PS_WORKER_INDEX`` is taken from ``JOB_COMPLETION_INDEX``
(the index Kubernetes gives each pod of an Indexed Job). In docker compose
set ``FTRL_PS_WORKER_INDEX=auto``: the servers then assign the lowest free
index, so ``docker compose up --scale worker=N`` works.

>>> SERVICE.argv([], {"FTRL_PS_SERVER": "http://s0:7000", "FTRL_PS_INPUT": "/data/train.svm",
...                   "FTRL_PS_NUM_WORKERS": "4", "JOB_COMPLETION_INDEX": "3"})[1:]
['--server=http://s0:7000', '--input=/data/train.svm', '--worker-index=3', '--num-workers=4']
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping, Sequence

from services.env import Service, set_if_unset

__all__ = ["SERVICE", "main"]

JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"


def _derive(environ: MutableMapping[str, str]) -> None:
    if environ.get(JOB_INDEX_ENV):
        set_if_unset(environ, "FTRL_PS_WORKER_INDEX", environ[JOB_INDEX_ENV])


SERVICE = Service(
    name="worker",
    command="worker",
    notes={
        "FTRL_PS_WORKER_INDEX": "When unset: $JOB_COMPLETION_INDEX (Kubernetes Indexed Job). "
        "'auto': the servers assign the lowest free index (docker compose --scale)",
        "FTRL_PS_TOKEN": "Keep it in a Secret; the service never prints it",
    },
    derive=_derive,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Train this worker's share; the exit code."""
    return SERVICE.run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
