"""What every service shares: environment -> typed options -> the role's runner.

A :class:`Service` reads its options with
:func:`ftrl_ps.cluster.settings.load_options` (``FTRL_PS_<FIELD>`` variables,
the service's own defaults below them), lets flags on its own command line win
(parsed by the flag definitions of the matching ``ftrl-ps`` sub-command), logs
the options on stderr with the token masked, and runs the role. Exit codes:
2 for a configuration error (one line on stderr), 1 for another ftrl-ps
error, otherwise the runner's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

from ftrl_ps.cluster.settings import describe, load_options
from ftrl_ps.errors import ConfigError, FTRLPSError
from ftrl_ps.learn.logs import setup_logging

__all__ = ["START_TIMEOUT", "Service", "command_line_parser"]

#: seconds ``services.worker``, ``services.export`` and ``services.serve`` wait at start
#: for the servers and their files (``FTRL_PS_START_TIMEOUT``): containers start in any
#: order (``services.server``: for its checkpoint directory)
START_TIMEOUT = 600.0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`ConfigError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


class _GivenOnly:
    """Stands in for the parser given to a sub-command's ``add_arguments``: every
    argument is added without a default and not required, so parsing returns
    only what the command line sets (positionals become optional)."""

    def __init__(self, container: Any) -> None:
        self._container = container

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        default = kwargs.pop("default", None)
        if isinstance(kwargs.get("help"), str):  # the help text still shows the CLI default
            kwargs["help"] = kwargs["help"].replace("%(default)s", str(default))
        kwargs.pop("required", None)
        kwargs["default"] = argparse.SUPPRESS
        if names and not names[0].startswith("-") and kwargs.get("nargs") is None:
            kwargs["nargs"] = "?"
        action: argparse.Action = self._container.add_argument(*names, **kwargs)
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> _GivenOnly:
        return _GivenOnly(self._container.add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, **kwargs: Any) -> _GivenOnly:
        return _GivenOnly(self._container.add_mutually_exclusive_group(**kwargs))


def command_line_parser(command: str, prog: str) -> argparse.ArgumentParser:
    """A parser with the flags of ``ftrl-ps COMMAND`` that returns only the flags given.

    >>> parser = command_line_parser("gen", "python -m services.gen")
    >>> vars(parser.parse_args(["--rows", "5", "/out"])), vars(parser.parse_args([]))
    ({'rows': 5, 'outdir': '/out'}, {})
    """
    module = importlib.import_module(f"ftrl_ps.cli.{command}_cmd")
    parser = _Parser(
        prog=prog,
        description=f"{module.HELP}. Configured by FTRL_PS_* environment variables "
        "(docs/deployment.md); the flags below win over them.",
        epilog="Each flag --some-flag is also the variable FTRL_PS_SOME_FLAG "
        "(a positional NAME: FTRL_PS_NAME).",
    )
    module.add_arguments(cast(argparse.ArgumentParser, _GivenOnly(parser)))
    return parser


@dataclass(frozen=True)
class Service:
    """One deployable entry point, ``python -m services.<name>``.

    Attributes
    ----------
    name : str
        Module name under ``services``.
    command : str
        The ``ftrl-ps`` sub-command whose flags its command line takes.
    options : type
        The options dataclass (its fields are the variables).
    runner : callable
        Runs the options; an int result is the exit code, anything else means 0.
    defaults : dict
        Field -> value when the environment does not set it (documented as the
        service default).
    required : frozenset of str
        Fields the service needs set although the options have a default.
    derive : callable, optional
        ``derive(environ)`` -> more defaults from other variables (e.g. an
        index Kubernetes gives the pod); they win over ``defaults``.
    notes : dict
        Field -> extra sentence for the documentation table.
    extras : dict
        Service-only ``FTRL_PS_*`` variables (no option) -> meaning.
    """

    name: str
    command: str
    options: type[Any]
    runner: Callable[[Any], Any]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    derive: Callable[[Mapping[str, str]], dict[str, Any]] | None = None
    notes: Mapping[str, str] = field(default_factory=dict)
    extras: Mapping[str, str] = field(default_factory=dict)

    @property
    def prog(self) -> str:
        return f"python -m services.{self.name}"

    def overrides(self, args: Sequence[str]) -> dict[str, Any]:
        """The options the command-line ``args`` set (typed by the CLI's flags)."""
        if not args:
            return {}
        return vars(command_line_parser(self.command, self.prog).parse_args(list(args)))

    def load(self, args: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Any:
        """The options this service runs with ``args`` and ``environ`` (default
        ``os.environ``); :class:`ConfigError` naming what is wrong."""
        env = os.environ if environ is None else environ
        defaults = {**self.defaults, **(self.derive(env) if self.derive else {})}
        return load_options(
            self.options,
            env,
            defaults=defaults,
            overrides=self.overrides(args),
            extras=self.extras,
            required=self.required,
            what=f"services.{self.name}",
        )

    def error(self, exc: Exception) -> None:
        print(f"services.{self.name}: error: {exc}", file=sys.stderr, flush=True)

    def main(
        self, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> int:
        """Load, log (token masked) and run; the exit code."""
        import ftrl_ps._kernels

        ftrl_ps._kernels.SKIP_BLAS_PROBE = True  # faster start-up, as ``ftrl-ps`` does
        try:
            options = self.load(sys.argv[1:] if argv is None else argv, environ)
        except ConfigError as exc:
            self.error(exc)
            return 2
        print(f"services.{self.name}: {describe(options)}", file=sys.stderr, flush=True)
        try:
            # the runner's own events: one line each, $FTRL_PS_LOG_FORMAT (text or json)
            setup_logging(f"services.{self.name}", level=getattr(options, "log_level", None))
            result = self.runner(options)
        except ConfigError as exc:
            self.error(exc)
            return 2
        except FTRLPSError as exc:
            self.error(exc)
            return 1
        except KeyboardInterrupt:
            print(f"services.{self.name}: interrupted", file=sys.stderr)
            return 130
        return result if isinstance(result, int) else 0
