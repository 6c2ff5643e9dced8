"""The documentation table of every service's ``FTRL_PS_*`` environment variables.

Generated from the services (:data:`services.SERVICE_MODULES`): one row per
field of the role's pydantic settings class
(:func:`ftrl_ps.cluster.settings.settings_class`; variable = ``FTRL_PS_`` +
the field name in upper case), with the service's defaults and notes, and
the help text of the ``ftrl-ps`` flag of the same name. docs/deployment.md
holds a copy, checked by tests/test_deploy_files.py::

    python -m tools.envtable --markdown                    # print the table
    python -m tools.envtable --write docs/deployment.md    # refresh the copy there
    python -m tools.envtable --check docs/deployment.md    # exit 1 if stale

The copy in a document sits between the lines ``<!-- env-table:start -->``
and ``<!-- env-table:end -->``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from ftrl_ps.cluster.settings import env_name, settings_class
from services import SERVICE_MODULES
from services._common import Service

__all__ = [
    "BEGIN",
    "END",
    "cli_arguments",
    "embedded_table",
    "main",
    "markdown_table",
    "replace_table",
    "services",
]

BEGIN = "<!-- env-table:start -->"
END = "<!-- env-table:end -->"


def services() -> list[Service]:
    """The :class:`~services._common.Service` of every service module, in run order."""
    return [importlib.import_module(f"services.{m}").SERVICE for m in SERVICE_MODULES]


class _Recorder:
    """Passed to a sub-command's ``add_arguments``: adds each argument to the real
    parser and keeps the :class:`argparse.Action` it returns, by ``dest``."""

    def __init__(self, container: Any, actions: dict[str, argparse.Action]) -> None:
        self._container = container
        self._actions = actions

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        action: argparse.Action = self._container.add_argument(*names, **kwargs)
        self._actions[action.dest] = action
        return action

    def add_argument_group(self, *args: Any, **kwargs: Any) -> _Recorder:
        return _Recorder(self._container.add_argument_group(*args, **kwargs), self._actions)

    def add_mutually_exclusive_group(self, **kwargs: Any) -> _Recorder:
        return _Recorder(self._container.add_mutually_exclusive_group(**kwargs), self._actions)


def cli_arguments(command: str) -> dict[str, argparse.Action]:
    """The arguments of ``ftrl-ps COMMAND`` by ``dest`` (help text, flag, metavar).

    >>> cli_arguments("gen")["test_rows"].option_strings
    ['--test-rows']
    """
    module = importlib.import_module(f"ftrl_ps.cli.{command}_cmd")
    actions: dict[str, argparse.Action] = {}
    parser = argparse.ArgumentParser(prog=f"ftrl-ps {command}")
    module.add_arguments(cast(argparse.ArgumentParser, _Recorder(parser, actions)))
    return actions


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _help(action: argparse.Action | None, command: str) -> str:
    if action is None:
        return ""
    text = action.help or ""
    if "%" in text:
        try:
            text = text % {**vars(action), "prog": f"ftrl-ps {command}"}
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _flag(action: argparse.Action | None, switch: bool) -> str:
    if action is None:
        return "(no flag)"
    longs = [s for s in action.option_strings if s.startswith("--")]
    if longs:
        flag = f"`{longs[0]}`"
    else:
        flag = f"{action.metavar or action.dest.upper()} (positional)"
    return f"{flag} (switch)" if switch else flag


def _shown(value: Any) -> str:
    return "" if value is None else f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _default(service: Service, name: str, info: Any, options_default: Any) -> str:
    if name in service.defaults:
        shown = _shown(service.defaults[name])
        if options_default is None or options_default == service.defaults[name]:
            return shown
        return f"{shown} (CLI: {_shown(options_default)})"
    if info.is_required():
        return "**required**"
    return _shown(options_default)


def markdown_table(all_services: Sequence[Service] | None = None) -> str:
    """One markdown table: service, variable, flag, default, meaning."""
    rows = [
        "| service | variable | flag | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for service in services() if all_services is None else all_services:
        where = f"`services.{service.name}`"
        actions = cli_arguments(service.command)
        plain = settings_class(service.options)
        fields = settings_class(service.options, required=service.required).model_fields
        order = {dest: i for i, dest in enumerate(actions)}  # as the command's --help
        for name, info in sorted(fields.items(), key=lambda kv: order.get(kv[0], len(order))):
            action = actions.get(name)
            meaning = _help(action, service.command)
            if name in service.notes:
                meaning = f"{meaning}. {service.notes[name]}" if meaning else service.notes[name]
            default = _default(service, name, info, plain.model_fields[name].default)
            rows.append(
                f"| {where} | `{env_name(name)}` | {_cell(_flag(action, info.annotation is bool))} "
                f"| {_cell(default)} | {_cell(meaning)} |"
            )
        for var, meaning in service.extras.items():
            rows.append(f"| {where} | `{var}` | (service only) |  | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


def embedded_table(text: str) -> str | None:
    """The table between the BEGIN/END markers of ``text`` (None without markers)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start + len(BEGIN):end].strip("\n") + "\n"


def replace_table(text: str, table: str) -> str:
    """``text`` with the table between the markers replaced by ``table``."""
    if embedded_table(text) is None:
        raise ValueError(f"no {BEGIN} ... {END} block in the document")
    start, end = text.find(BEGIN), text.find(END)
    return text[:start] + BEGIN + "\n" + table + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``--markdown`` prints the table, ``--write FILE`` / ``--check FILE`` its copy."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.envtable",
        description="The FTRL_PS_* environment variables of every service, as markdown.",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the table")
    group.add_argument("--write", metavar="FILE", help="replace the table embedded in FILE")
    group.add_argument("--check", metavar="FILE", help="exit 1 if FILE's table is out of date")
    args = parser.parse_args(argv)
    table = markdown_table()
    if args.markdown:
        sys.stdout.write(table)
        return 0
    path = Path(args.write or args.check)
    text = path.read_text()
    if args.write:
        path.write_text(replace_table(text, table))
        print(f"updated the table in {path}")
        return 0
    if embedded_table(text) != table:
        print(f"{path}: the environment table is out of date; run "
              f"python -m tools.envtable --write {path}", file=sys.stderr)
        return 1
    print(f"{path}: the environment table is up to date")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
