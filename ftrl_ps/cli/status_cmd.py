"""``ftrl-ps status``: what every server shard of a cluster reports."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ftrl_ps.cli import _common as c
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.ps.completion import RunProgress

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "run", "summary"]

NAME = "status"
HELP = "show the status of every server shard (layout, workers and clocks, counters)"
DESCRIPTION = """\
Ask every shard for its /v1/status and print a short summary per shard (with
--json, the full answers as one JSON list). Shard 0 also reports the workers:
state (live, finished, dead), clock, rows and progressive log loss.

example:
  ftrl-ps status --server http://127.0.0.1:7000,http://127.0.0.1:7001
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_server_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the raw answers as JSON")


def summary(index: int, status: dict[str, Any]) -> list[str]:
    """Human-readable lines for one shard's status."""
    shard = status.get("shard", {})
    counters = status.get("counters", {})
    lines = [
        f"shard {index}: keys [{shard.get('begin')}, {shard.get('end')}), "
        f"layout {status.get('layout')}, {counters.get('pushes', 0)} pushes "
        f"({counters.get('keys_pushed', 0):,} keys), {counters.get('pulls', 0)} pulls "
        f"({counters.get('keys_pulled', 0):,} keys), up {status.get('uptime_s')} s"
    ]
    clock = status.get("clock")
    if clock:
        staleness = clock.get("staleness")
        lines.append(
            f"  SSP staleness {'inf' if staleness is None else staleness}, "
            f"min clock {clock.get('min_clock')}, max gap allowed {clock.get('max_gap_allowed')}"
        )
        for w in clock.get("workers", []):
            stats = w.get("stats", {})
            rows = stats.get("rows", 0)
            loss = stats.get("loss_sum", 0.0) / rows if rows else float("nan")
            lines.append(
                f"  worker {w['index']} (id {w['worker_id']}): {w['state']}, clock {w['clock']}, "
                f"{int(rows):,} rows, progressive logloss {loss:.5f}, "
                f"seen {w['seconds_since_seen']} s ago"
            )
        if clock.get("missing_indices"):
            lines.append(f"  not registered yet: {clock['missing_indices']}")
        progress = RunProgress.from_snapshot(clock)
        lines.append(f"  run {'complete' if progress.complete else 'not complete'}: "
                     f"{progress.describe()}")
    return lines


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.ps.client import PSClient
    from ftrl_ps.ps.worker_main import parse_urls

    urls = parse_urls(args.server)
    with PSClient(urls, token=resolve_token(args.token)) as client:
        answers = [client.status(i) for i in range(len(urls))]
    if args.json:
        json.dump(answers, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        for i, status in enumerate(answers):
            print("\n".join(summary(i, status)))
    return 0
