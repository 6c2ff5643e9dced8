"""The process roles a launcher can start, each a typed options class and a runner.

A role is what one child process of a cluster does: ``server`` (one shard,
:class:`~ftrl_ps.server.options.ShardOptions`) or ``worker``
(:class:`~ftrl_ps.ps.worker_main.WorkerOptions`). A forked child calls the
runner on the options object directly; an exec'd child gets the options as
JSON (see :mod:`ftrl_ps.cluster.child`). Secrets never travel in options: the
token reaches children through the environment (``FTRL_PS_TOKEN``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.worker_main import WorkerOptions
from ftrl_ps.server.options import ShardOptions

__all__ = ["ROLES", "Role", "options_from_json", "options_to_json", "role_of"]


@dataclass(frozen=True)
class Role:
    """A role: its name, options class and ``module:function`` runner."""

    name: str
    options: type[Any]
    runner: str

    def run(self, options: Any) -> int:
        """Run ``options`` in this process; the exit code (a report counts as 0)."""
        module, _, func = self.runner.partition(":")
        fn: Callable[[Any], Any] = getattr(importlib.import_module(module), func)
        result = fn(options)
        return result if isinstance(result, int) else 0


ROLES: dict[str, Role] = {
    "server": Role("server", ShardOptions, "ftrl_ps.server.run:run_shard"),
    "worker": Role("worker", WorkerOptions, "ftrl_ps.ps.worker_main:run_worker"),
}


def role_of(options: Any) -> Role:
    """The role whose options class ``options`` is."""
    for role in ROLES.values():
        if isinstance(options, role.options):
            return role
    raise ConfigError(f"no process role takes {type(options).__name__}")


def options_to_json(options: Any) -> str:
    """``options`` as one line of JSON (token fields must be None: secrets use env)."""
    values = dataclasses.asdict(options)
    if values.get("token") is not None:
        raise ConfigError("a token must reach a child through FTRL_PS_TOKEN, not its options")
    return json.dumps(values, sort_keys=True)


def options_from_json(role: str, text: str) -> Any:
    """The options object of ``role`` from :func:`options_to_json`'s text."""
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
    try:
        values = json.loads(text)
        return ROLES[role].options(**values)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"bad {role} options: {exc}") from exc
