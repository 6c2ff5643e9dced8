"""The bearer token of a cluster: one environment variable, one lookup.

Servers, workers, export, status and the local cluster all resolve the token
the same way: an explicit value wins, else ``$FTRL_PS_TOKEN``, else no token.
The variable keeps the secret out of command lines (``ps`` shows those).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["TOKEN_ENV", "resolve_token"]

#: environment variable holding the bearer token
TOKEN_ENV = "FTRL_PS_TOKEN"


def resolve_token(
    explicit: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """``explicit`` if given, else a non-empty ``$FTRL_PS_TOKEN``, else None.

    >>> resolve_token("abc", {}), resolve_token(None, {"FTRL_PS_TOKEN": "x"}), resolve_token()
    ('abc', 'x', None)
    """
    if explicit is not None:
        return explicit
    value = (os.environ if environ is None else environ).get(TOKEN_ENV)
    return value or None
