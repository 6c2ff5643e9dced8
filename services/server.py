"""``python -m services.server``: one parameter-server shard, configured by env.

Service defaults (a container must be reachable): ``FTRL_PS_HOST=0.0.0.0`` and
``FTRL_PS_PORT=7000`` unless set. In Kubernetes (``KUBERNETES_SERVICE_HOST``
set) an unset ``FTRL_PS_SHARD_INDEX`` is the number after the last ``-`` of
the hostname: the pod ordinal of a StatefulSet (``ftrl-ps-server-1`` -> 1).

>>> SERVICE.argv([], {"FTRL_PS_NUM_SHARDS": "2", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
...                   "HOSTNAME": "ftrl-ps-server-1"})
['server', '--host=0.0.0.0', '--port=7000', '--shard-index=1', '--num-shards=2']
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import MutableMapping, Sequence

from services.env import Service, set_if_unset

__all__ = ["SERVICE", "main", "ordinal"]


def ordinal(hostname: str) -> int | None:
    """The trailing ``-N`` of a StatefulSet pod's hostname (None if absent).

    >>> ordinal("ftrl-ps-server-12"), ordinal("ftrl-ps-server-12.svc"), ordinal("web")
    (12, 12, None)
    """
    match = re.fullmatch(r".*\D-(\d+)", hostname.split(".", 1)[0])
    return int(match.group(1)) if match else None


def _derive(environ: MutableMapping[str, str]) -> None:
    if environ.get("FTRL_PS_SHARD_INDEX") or not environ.get("KUBERNETES_SERVICE_HOST"):
        return
    index = ordinal(environ.get("HOSTNAME") or socket.gethostname())
    if index is not None:
        set_if_unset(environ, "FTRL_PS_SHARD_INDEX", str(index))


SERVICE = Service(
    name="server",
    command="server",
    defaults={"FTRL_PS_HOST": "0.0.0.0", "FTRL_PS_PORT": "7000"},
    notes={
        "FTRL_PS_SHARD_INDEX": "Kubernetes (KUBERNETES_SERVICE_HOST set): when unset, the "
        "StatefulSet pod ordinal, i.e. the number after the last '-' of the hostname",
        "FTRL_PS_TOKEN": "Keep it in a Secret; the service never prints it",
    },
    derive=_derive,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the shard until SIGTERM/SIGINT; the exit code."""
    return SERVICE.run(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
