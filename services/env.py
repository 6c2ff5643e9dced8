"""Environment variables -> ``ftrl-ps`` command line, derived from the real parser.

Every option ``--some-flag`` of a sub-command is read from
``FTRL_PS_SOME_FLAG``; a positional argument from ``FTRL_PS_<DEST>`` (e.g.
``gen``'s OUTDIR from ``FTRL_PS_OUTDIR``). The list is built by walking the
sub-parser of :func:`ftrl_ps.cli.build_parser`, so it cannot drift from the CLI.

Rules
-----
* switches (``store_true`` flags such as ``--wait``) take
  ``1/true/yes/on`` or ``0/false/no/off``;
* an empty value counts as unset (handy for ``${VAR:-}`` in compose files);
* an ``FTRL_PS_*`` variable the command does not know is an error that names
  it (a typo must not be silently ignored);
* arguments given on the service's own command line win over the environment.

Run ``python -m services.env --markdown`` for the table of every variable
(``--write FILE`` / ``--check FILE`` update / verify the copy in a document).

Examples
--------
>>> argv_from_env("gen", {"FTRL_PS_OUTDIR": "/data", "FTRL_PS_ROWS": "1000",
...                       "FTRL_PS_QUIET": "yes"})
['gen', '--rows=1000', '--quiet', '--', '/data']
>>> argv_from_env("gen", {"FTRL_PS_OUTDIR": "/data", "FTRL_PS_ROWS": "1000"},
...               ["--rows", "5"])
['gen', '--rows', '5', '--', '/data']
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import sys
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from ftrl_ps.errors import ConfigError

__all__ = [
    "PREFIX",
    "EnvVar",
    "Service",
    "argv_from_env",
    "env_vars",
    "explicit_dests",
    "parse_switch",
    "subparser",
]

PREFIX = "FTRL_PS_"
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
SECRET_FLAGS = frozenset({"--token"})

_SWITCH_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction)


@dataclass(frozen=True)
class EnvVar:
    """One environment variable of a sub-command.

    Attributes
    ----------
    name : str
        ``FTRL_PS_...``.
    dest : str
        The argparse destination it fills.
    flag : str or None
        The long option (``--bits``); None for a positional argument.
    switch : bool
        True for a flag without a value (``store_true``).
    action : argparse.Action
        The parser's action (help text, default, required).
    """

    name: str
    dest: str
    flag: str | None
    switch: bool
    action: argparse.Action = field(repr=False, compare=False)

    @property
    def positional(self) -> bool:
        return self.flag is None


def subparser(command: str) -> argparse.ArgumentParser:
    """A fresh copy of the sub-parser of ``ftrl-ps COMMAND``."""
    from ftrl_ps.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            if command not in action.choices:
                raise ConfigError(
                    f"unknown ftrl-ps command {command!r}; known: {', '.join(action.choices)}"
                )
            parser: argparse.ArgumentParser = action.choices[command]
            return parser
    raise ConfigError("ftrl-ps parser has no sub-commands")  # pragma: no cover


def _env_name(action: argparse.Action) -> str:
    longs = [s for s in action.option_strings if s.startswith("--")]
    base = longs[0][2:] if longs else action.dest
    return PREFIX + base.replace("-", "_").upper()


def env_vars(command: str) -> list[EnvVar]:
    """Every variable of ``ftrl-ps COMMAND``, in the parser's order.

    Raises
    ------
    ConfigError
        The parser has an action kind this mapping does not support (e.g. an
        ``append`` flag) or two arguments would share one variable name.
    """
    out: dict[str, EnvVar] = {}
    for action in subparser(command)._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        switch = isinstance(action, _SWITCH_ACTIONS)
        if not switch and (
            type(action) is not argparse._StoreAction or action.nargs not in (None, "?")
        ):
            raise ConfigError(
                f"ftrl-ps {command}: argument {action.dest!r} "
                f"({type(action).__name__}, nargs={action.nargs!r}) has no environment mapping"
            )
        name = _env_name(action)
        if name in out:
            raise ConfigError(f"ftrl-ps {command}: {name} would name two arguments")
        longs = [s for s in action.option_strings if s.startswith("--")]
        flag = longs[0] if longs else (action.option_strings[0] if action.option_strings else None)
        out[name] = EnvVar(name, action.dest, flag, switch, action)
    return list(out.values())


def parse_switch(name: str, text: str) -> bool:
    """``1/true/yes/on`` -> True, ``0/false/no/off`` -> False (any case)."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{name}={text!r}: expected one of 1/true/yes/on or 0/false/no/off")


def explicit_dests(command: str, args: Sequence[str]) -> set[str]:
    """Destinations the command-line ``args`` set explicitly (they win over env).

    Parses ``args`` with a copy of the sub-parser whose defaults are
    suppressed and whose checks are off, so only what was given shows up.
    Arguments argparse cannot parse give an empty set: the real parse then
    reports them.
    """
    if not args:
        return set()
    parser = subparser(command)
    dests = set()
    for action in parser._actions:
        action.default = argparse.SUPPRESS
        action.required = False
        action.type = None
        action.choices = None
        dests.add(action.dest)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            namespace, _ = parser.parse_known_args(list(args))
    except SystemExit:
        return set()
    return set(vars(namespace)) & dests


def _unknown_message(command: str, unknown: Iterable[str], known: Sequence[str]) -> str:
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return (
        f"unknown environment variable(s) for ftrl-ps {command}: {', '.join(parts)}. "
        f"Known: {', '.join(sorted(known))}"
    )


def argv_from_env(
    command: str,
    environ: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    *,
    extras: Iterable[str] = (),
) -> list[str]:
    """The ``ftrl-ps`` argv (starting with ``command``) from ``FTRL_PS_*`` variables.

    Parameters
    ----------
    command : str
        The sub-command, e.g. ``"server"``.
    environ : mapping, optional
        The environment (default ``os.environ``); other variables are ignored.
    args : sequence of str
        Explicit command-line arguments; they come after the environment's
        options and replace the environment's value of every argument they set.
    extras : iterable of str
        ``FTRL_PS_*`` names the caller handles itself (not an error, not mapped).

    Raises
    ------
    ConfigError
        An unknown ``FTRL_PS_*`` variable or a switch value that is not a boolean.
    """
    environ = os.environ if environ is None else environ
    specs = env_vars(command)
    known = [v.name for v in specs]
    skip = set(extras)
    present = {k: v for k, v in environ.items() if k.startswith(PREFIX) and k not in skip}
    unknown = sorted(set(present) - set(known))
    if unknown:
        raise ConfigError(_unknown_message(command, unknown, known))
    given = explicit_dests(command, args)
    options: list[str] = []
    positionals: list[str] = []
    for var in specs:
        text = present.get(var.name, "")
        if text == "" or var.dest in given:
            continue
        if var.switch:
            if parse_switch(var.name, text):
                options.append(str(var.flag))
        elif var.positional:
            positionals.append(text)
        else:
            options.append(f"{var.flag}={text}")
    argv = [command, *options, *args]
    if positionals:
        argv += [*([] if "--" in args else ["--"]), *positionals]
    return argv


def masked(argv: Sequence[str]) -> str:
    """``argv`` as one line with secret values (``--token``) replaced by ``***``."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                arg = f"{flag}=***"
            else:
                hide_next = True
        out.append(arg)
    return " ".join(out)


def set_if_unset(environ: MutableMapping[str, str], name: str, value: str) -> None:
    """``environ[name] = value`` unless it already holds a non-empty value."""
    if not environ.get(name):
        environ[name] = value


@dataclass(frozen=True)
class Service:
    """One deployable entry point: ``python -m services.<name>``.

    Attributes
    ----------
    name : str
        Module name under ``services``.
    command : str
        The ``ftrl-ps`` sub-command it runs.
    defaults : dict
        Variable -> value used when neither the environment nor the command
        line sets it (documented as the service default).
    notes : dict
        Variable -> extra sentence for the documentation table.
    extras : dict
        Service-only ``FTRL_PS_*`` variables (not CLI flags) -> meaning.
    derive : callable, optional
        ``derive(environ)`` fills more variables into the (copied) environment
        before the mapping, e.g. an index from Kubernetes.
    """

    name: str
    command: str
    defaults: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    extras: dict[str, str] = field(default_factory=dict)
    derive: Callable[[MutableMapping[str, str]], None] | None = None

    def argv(self, args: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> list[str]:
        """The ``ftrl-ps`` argv this service runs with ``args`` and ``environ``."""
        env = dict(os.environ if environ is None else environ)
        if self.derive is not None:
            self.derive(env)
        for name, value in self.defaults.items():
            set_if_unset(env, name, value)
        return argv_from_env(self.command, env, args, extras=self.extras)

    def run(
        self, args: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> int:
        """Build the argv, log it (token masked) on stderr, run ``ftrl-ps``; the exit code."""
        from ftrl_ps.cli import main

        args = sys.argv[1:] if args is None else list(args)
        try:
            argv = self.argv(args, environ)
        except ConfigError as exc:
            print(f"services.{self.name}: error: {exc}", file=sys.stderr)
            return 2
        print(f"services.{self.name}: ftrl-ps {masked(argv)}", file=sys.stderr, flush=True)
        return main(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m services.env --markdown | --write FILE | --check FILE``."""
    from services import table

    return table.main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
