"""``python -m services.serve``: the prediction service (``ftrl-ps serve``), configured by env.

Service defaults (a container must be reachable): host ``0.0.0.0`` and port
``8000`` unless ``FTRL_PS_HOST`` / ``FTRL_PS_PORT`` say otherwise. The model
source is ``FTRL_PS_MODEL`` (a file, reloaded when replaced) or
``FTRL_PS_SERVER`` (the shards); ``FTRL_PS_LEARN=1`` adds ``/v1/learn``.
It waits up to ``FTRL_PS_START_TIMEOUT`` (service default 600 s) for the shards
(or the model file), so it may start before them.

>>> opts = SERVICE.load([], {"FTRL_PS_SERVER": "http://s0:7000,http://s1:7000",
...                          "FTRL_PS_LEARN": "yes", "FTRL_PS_PUSH_INTERVAL": "0.25"})
>>> opts.host, opts.port, opts.server, opts.learn, opts.push_interval, opts.start_timeout
('0.0.0.0', 8000, 'http://s0:7000,http://s1:7000', True, 0.25, 600.0)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from ftrl_ps.server.serve_options import ServeOptions, run_serve
from services._common import START_TIMEOUT, Service

__all__ = ["SERVICE", "main"]

SERVICE = Service(
    name="serve",
    command="serve",
    options=ServeOptions,
    runner=run_serve,
    defaults={"host": "0.0.0.0", "port": 8000, "start_timeout": START_TIMEOUT},
    notes={
        "token": "Guards /v1/learn and is sent to the shards; keep it in a Secret",
        "predict_token": "Guards /v1/predict when set; keep it in a Secret",
    },
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Serve until SIGTERM (then push what was learned); the exit code."""
    return SERVICE.main(argv, environ)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
