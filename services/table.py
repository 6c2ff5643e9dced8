"""The documentation table of every service's environment variables.

Generated from the real parser (:mod:`services.env`), so docs/deployment.md
can be checked and refreshed mechanically::

    python -m services.env --markdown                    # print the table
    python -m services.env --write docs/deployment.md    # refresh the copy there
    python -m services.env --check docs/deployment.md    # exit 1 if stale

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

from services import SERVICE_MODULES
from services.env import EnvVar, Service, env_vars

__all__ = ["BEGIN", "END", "embedded_table", "markdown_table", "replace_table", "services"]

BEGIN = "<!-- env-table:start -->"
END = "<!-- env-table:end -->"


def services() -> list[Service]:
    """The :class:`~services.env.Service` of every service module, in run order."""
    return [importlib.import_module(f"services.{m}").SERVICE for m in SERVICE_MODULES]


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _help(var: EnvVar, command: str) -> str:
    action = var.action
    text = action.help or ""
    if "%" in text:
        try:
            text = text % {**vars(action), "prog": f"ftrl-ps {command}"}
        except (KeyError, TypeError, ValueError):
            pass
    return text


def _default(var: EnvVar, service: Service) -> str:
    action = var.action
    cli = "" if var.switch else action.default
    if var.name in service.defaults:
        shown = f"`{service.defaults[var.name]}`"
        return f"{shown} (CLI: `{cli}`)" if cli not in (None, "") else shown
    if action.required:
        return "**required**"
    if var.switch:
        return "`false`"
    return "" if action.default is None else f"`{action.default}`"


def markdown_table(all_services: Sequence[Service] | None = None) -> str:
    """One markdown table: service, variable, flag, default, meaning."""
    rows = [
        "| service | variable | flag | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for service in services() if all_services is None else all_services:
        where = f"`services.{service.name}`"
        for var in env_vars(service.command):
            flag = f"`{var.flag}`" if var.flag else f"{var.action.metavar or var.dest} (positional)"
            if var.switch:
                flag += " (switch)"
            meaning = _help(var, service.command)
            if var.name in service.notes:
                meaning = f"{meaning}. {service.notes[var.name]}" if meaning else (
                    service.notes[var.name])
            rows.append(
                f"| {where} | `{var.name}` | {_cell(flag)} | {_cell(_default(var, service))} "
                f"| {_cell(meaning)} |"
            )
        for name, meaning in service.extras.items():
            rows.append(f"| {where} | `{name}` | (service only) |  | {_cell(meaning)} |")
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
    parser = argparse.ArgumentParser(
        prog="python -m services.env",
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
              f"python -m services.env --write {path}", file=sys.stderr)
        return 1
    print(f"{path}: the environment table is up to date")
    return 0
