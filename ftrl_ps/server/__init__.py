"""The parameter server: one FastAPI/uvicorn process per shard.

Public names are imported lazily: importing the package (e.g. for
:class:`~ftrl_ps.server.options.ShardOptions`) does not pull in FastAPI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServerSettings", "ServerState", "create_app", "serve"]

_WHERE = {
    "ServerSettings": "ftrl_ps.ps.shard_settings",
    "ServerState": "ftrl_ps.ps.state",
    "create_app": "ftrl_ps.server.app",
    "serve": "ftrl_ps.server.serve",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'ftrl_ps.server' has no attribute {name!r}")
