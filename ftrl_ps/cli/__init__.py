"""The ``ftrl-ps`` command line.

Each sub-command lives in its own module under ``ftrl_ps.cli`` and exposes

* ``NAME: str`` and ``HELP: str``,
* ``add_arguments(parser: argparse.ArgumentParser) -> None``,
* ``run(args: argparse.Namespace) -> int`` (the exit code).

Bad arguments exit with code 2 and a one-line message (argparse's convention);
an :class:`~ftrl_ps.errors.FTRLPSError` or a file error (``OSError``) raised
while running exits with code 1 and its message, never a traceback; a closed
stdout pipe (``| head``) exits quietly with 141, as for SIGPIPE.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, NoReturn

from ftrl_ps.errors import ConfigError, FTRLPSError

__all__ = ["COMMANDS", "build_parser", "console_main", "main"]

log = logging.getLogger("ftrl_ps.cli")

#: sub-command modules, in the order ``--help`` lists them
COMMANDS: tuple[str, ...] = (
    "train",
    "tune",
    "eval",
    "predict",
    "gen",
    "server",
    "worker",
    "export",
    "status",
    "serve",
)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"ftrl_ps.cli.{name}_cmd")
    except ModuleNotFoundError as exc:  # a command not built yet
        if exc.name == f"ftrl_ps.cli.{name}_cmd":
            return None
        raise


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-format`` and (unless the command has its own) ``--log-level``."""
    from ftrl_ps.learn.logs import FORMAT_ENV, FORMATS, LEVELS

    g = parser.add_argument_group("logging (stderr, one line per event)")
    g.add_argument("--log-format", choices=FORMATS, default=None,
                   help=f"text (default; or ${FORMAT_ENV}) or json, one object per line "
                        "for log collectors")
    if "--log-level" not in parser._option_string_actions:
        g.add_argument("--log-level", choices=LEVELS, default="info",
                       help="lowest level logged (default info)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full argument parser (also used by tests that check deployment files).

    With ``only`` (a command name), just that command's sub-parser is built: the
    other command modules are not imported (tens of milliseconds of start-up).
    """
    from ftrl_ps import __version__

    parser = _Parser(
        prog="ftrl-ps",
        description=(
            "Sparse FTRL-Proximal logistic regression for CTR data (libsvm input), "
            "in one process or as a parameter-server cluster."
        ),
    )
    parser.add_argument("--version", action=_Version, version=f"ftrl-ps {__version__}",
                        help="show the version and how the kernels run here, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(
            module.NAME,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        _add_log_arguments(p)
        p.set_defaults(_run=module.run, _parser=p)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line (and where to read more), not the
    whole usage block first (20 lines for ``train``); sub-parsers are of this class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class _Version(argparse.Action):
    """``--version``: the version, then how this machine runs the kernels."""

    def __init__(self, option_strings: Sequence[str], version: str, dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)
        self.version = version

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from ftrl_ps.ps.kernels import describe

        sys.stdout.write(f"{self.version}\n{describe()}\n")
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    import ftrl_ps._kernels

    # ~0.4 s less start-up in every ftrl-ps process that loads kernels; numba
    # itself is only imported when a command needs it
    ftrl_ps._kernels.SKIP_BLAS_PROBE = True
    from ftrl_ps.learn.logs import setup_logging

    argv = list(sys.argv[1:] if argv is None else argv)
    # `ftrl-ps CMD ...`: build CMD's parser alone; anything else (--help, --version,
    # a typo) gets the full parser and its messages
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        setup_logging(args.command, args.log_format, args.log_level)
        code: int = args._run(args)
    except ConfigError as exc:
        args._parser.error(str(exc))  # exits 2
        raise AssertionError("unreachable") from exc
    except FTRLPSError as exc:  # expected: one line, no traceback
        log.error("error: %s", exc)
        return 1
    except KeyboardInterrupt:
        log.warning("interrupted")
        return 130
    except BrokenPipeError:  # `ftrl-ps predict ... | head`: the reader has what it wanted
        return _stdout_gone()
    except OSError as exc:  # a file the system refused: one line, as for our own errors
        log.debug("traceback", exc_info=True)
        where = f"{exc.filename}: " if exc.filename else ""
        log.error("error: %s%s", where, exc.strerror or exc)
        return 1
    return code


def _stdout_gone() -> int:
    """Stdout's reader closed the pipe: send what is left to /dev/null (so the final
    flush does not fail again) and exit as a program killed by SIGPIPE does (141)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


def console_main() -> None:
    """The ``ftrl-ps`` command: :func:`main`, then leave without interpreter teardown.

    Tearing down an interpreter that has loaded numba's compiler takes ~0.4 s
    (measured: 0.40 s vs 0.01 s with ``os._exit``), a tenth of a one-million-row
    run. Once :func:`main` has returned, every file is written and closed and
    every child process is stopped, so the command flushes its output and
    exits at once. Errors that escape :func:`main` take the normal way out.

    Before it, numpy is told to start one BLAS thread
    (:func:`ftrl_ps._kernels.one_blas_thread`), unless the environment says otherwise,
    and glibc to reuse freed chunk arrays (:func:`ftrl_ps.core.memory.keep_freed_chunks`;
    a shard sets its own, ``server.run``).
    """
    import ftrl_ps._kernels

    ftrl_ps._kernels.one_blas_thread()  # before numpy is imported (main imports it)
    from ftrl_ps.core.memory import keep_freed_chunks

    keep_freed_chunks()  # the reader's chunk arrays reused, not faulted in anew
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # stdout was a pipe that closed
        code = code or _stdout_gone()
    except (OSError, ValueError):
        code = code or 1
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
