"""``python -m services.export``: save (and evaluate) the servers' model, configured by env.

Typical use as the last step of a run::

    FTRL_PS_SERVER=http://server-0:7000,http://server-1:7000 FTRL_PS_WAIT=1 \\
    FTRL_PS_MODEL=/models/model.ftrl FTRL_PS_TEST=/data/test.svm python -m services.export

It waits up to ``FTRL_PS_START_TIMEOUT`` (service default 600 s) for the
servers and the test file, then (``FTRL_PS_WAIT``) for every configured
worker to finish: an incomplete run fails unless ``FTRL_PS_ALLOW_INCOMPLETE``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from ftrl_ps.ps.export import ExportOptions, run_export
from services._common import START_TIMEOUT, Service

__all__ = ["SERVICE", "main"]

SERVICE = Service(
    name="export",
    command="export",
    options=ExportOptions,
    runner=run_export,
    defaults={"start_timeout": START_TIMEOUT},
    notes={"token": "Keep it in a Secret; the service never prints it"},
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Wait (with FTRL_PS_WAIT), save the model, print test metrics; the exit code."""
    return SERVICE.main(argv, environ)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
