"""``python -m services.server``: one parameter-server shard, configured by env.

Service defaults (a container must be reachable): host ``0.0.0.0`` and port
``7000`` unless ``FTRL_PS_HOST`` / ``FTRL_PS_PORT`` say otherwise. In
Kubernetes (``KUBERNETES_SERVICE_HOST`` set) an unset ``FTRL_PS_SHARD_INDEX``
is the number after the last ``-`` of the hostname: the pod ordinal of a
StatefulSet (``ftrl-ps-server-1`` -> 1).

>>> opts = SERVICE.load([], {"FTRL_PS_NUM_SHARDS": "2", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
...                          "HOSTNAME": "ftrl-ps-server-1"})
>>> opts.host, opts.port, opts.shard_index, opts.num_shards
('0.0.0.0', 7000, 1, 2)
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ftrl_ps.server.options import ShardOptions
from ftrl_ps.server.run import run_shard
from services._common import START_TIMEOUT, Service

__all__ = ["SERVICE", "main", "ordinal"]


def ordinal(hostname: str) -> int | None:
    """The trailing ``-N`` of a StatefulSet pod's hostname (None if absent).

    >>> ordinal("ftrl-ps-server-12"), ordinal("ftrl-ps-server-12.svc"), ordinal("web")
    (12, 12, None)
    """
    match = re.fullmatch(r".*\D-(\d+)", hostname.split(".", 1)[0])
    return int(match.group(1)) if match else None


def _derive(environ: Mapping[str, str]) -> dict[str, Any]:
    """The shard index from the pod ordinal, in Kubernetes only."""
    if not environ.get("KUBERNETES_SERVICE_HOST"):
        return {}
    index = ordinal(environ.get("HOSTNAME") or socket.gethostname())
    return {} if index is None else {"shard_index": index}


SERVICE = Service(
    name="server",
    command="server",
    options=ShardOptions,
    runner=run_shard,
    defaults={"host": "0.0.0.0", "port": 7000, "start_timeout": START_TIMEOUT},
    derive=_derive,
    notes={
        "shard_index": "Kubernetes (KUBERNETES_SERVICE_HOST set): when unset, the "
        "StatefulSet pod ordinal, i.e. the number after the last '-' of the hostname",
        "token": "Keep it in a Secret; the service never prints it",
    },
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the shard until SIGTERM/SIGINT; the exit code."""
    return SERVICE.main(argv, environ)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
