"""``ftrl-ps status``: what every server shard of a cluster reports."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from ftrl_ps.cli import _common as c
from ftrl_ps.errors import FTRLPSError
from ftrl_ps.ps.auth import resolve_token
from ftrl_ps.ps.completion import RunProgress

__all__ = ["DESCRIPTION", "HELP", "NAME", "add_arguments", "cluster_line", "cluster_record",
           "run", "statuses", "summary", "watch"]

NAME = "status"
HELP = "show the status of every server shard (layout, workers and clocks, counters)"
DESCRIPTION = """\
Ask every shard for its /v1/status and print a short summary per shard (with
--json, the full answers as one JSON list). Shard 0 also reports the workers:
state (live, finished, dead), clock, rows and progressive log loss. A shard
that does not answer (within 2 s) is said as such, the others are still shown,
and the command exits 1 (with --json, {"shard": i, "error": "..."} stands for it).

With --watch the summary is refreshed every 2 s (or --watch SECONDS) until
Ctrl-C: in place on a terminal, as successive blocks elsewhere. Its first line
sums up the cluster: rows, rows/s over the last refreshes, progressive log
loss, min..max clock, restarts and worker states. With --watch --json each
refresh is one line of JSON, flushed (JSON lines): {"time": unix seconds,
"cluster": that summary (null while shard 0 does not answer), "shards": the
list --json prints}.

examples:
  ftrl-ps status --server http://127.0.0.1:7000,http://127.0.0.1:7001
  ftrl-ps status --server http://127.0.0.1:7000 --watch
  ftrl-ps status --server http://127.0.0.1:7000 --watch 5 --json >> status.jsonl
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c.add_server_arguments(parser)
    parser.add_argument("--json", action="store_true",
                        help="print the raw answers as JSON (with --watch: one line per refresh)")
    parser.add_argument("--watch", nargs="?", type=c.positive_float, const=2.0, default=None,
                        metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")


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
    if counters.get("withdrawals"):  # fences (docs/durability.md, section 4)
        lines.append(f"  {counters['withdrawals']} push(es) of dead workers withdrawn here "
                     "(their input was handed to another worker)")
    settings = status.get("settings") or {}
    if settings.get("merge_rule"):  # how pushes are merged, and in which float type
        lines.append(f"  merge rule {settings['merge_rule']}, {settings.get('dtype')} state")
    clock = status.get("clock")
    if clock:
        staleness = clock.get("staleness")
        lines.append(
            f"  SSP staleness {'inf' if staleness is None else staleness}, "
            f"min clock {_shown(clock.get('min_clock'))}, largest clock gap a wait was "
            f"granted at {_shown(clock.get('max_gap_allowed'))}"
        )
        for w in clock.get("workers", []):
            stats = w.get("stats", {})
            rows = stats.get("rows", 0)
            loss = stats.get("loss_sum", 0.0) / rows if rows else float("nan")
            slept = (f", {stats['straggle_seconds']:.1f} s slept as an injected straggler"
                     if "straggle_seconds" in stats else "")
            idle = (f", idle {stats['idle_seconds']:.1f} s for units others hold"
                    if stats.get("idle_seconds") else "")
            lines.append(
                f"  worker {w['index']} (id {w['worker_id']}, pid {w.get('pid')}): {w['state']}, "
                f"clock {w['clock']}, "
                f"{int(rows):,} rows, progressive logloss {loss:.5f}, "
                f"SSP waits {stats.get('wait_seconds', 0.0):.1f} s{idle}{slept}, "
                f"seen {w['seconds_since_seen']} s ago"
            )
        if clock.get("missing_indices"):
            lines.append(f"  not registered yet: {clock['missing_indices']}")
        warm = clock.get("warm_start")
        if warm:  # docs/algorithm.md, section 13
            who = "no worker yet" if warm.get("worker") is None else f"worker {warm['worker']}"
            lines.append(f"  warm start ({warm.get('rounds')} rounds, {who} alone): "
                         f"{'over' if warm.get('over') else 'the others wait'}")
        work = status.get("work") or {}
        if work.get("plan"):  # --split units
            held = ", ".join(f"worker {i}: {n}" for i, n in sorted(work["held"].items()))
            lines.append(f"  work units: {work['done']} of {work['units']} done "
                         f"({work['rows_done']:,} rows), {work['assigned']} handed out"
                         f"{f' ({held})' if held else ''}, {work['pending']} pending")
        progress = RunProgress.from_snapshot(clock, status.get("work"))
        lines.append(f"  run {'complete' if progress.complete else 'not complete'}: "
                     f"{progress.describe()}")
    return lines


def _shown(value: Any) -> str:
    """A status field for people: none (e.g. no live worker's clock) is '-'."""
    return "-" if value is None else str(value)


def cluster_line(status0: dict[str, Any], history: Any) -> str:
    """The first line of ``--watch``: the cluster summed up (``history``: a
    :class:`~ftrl_ps.ps.overview.History` of earlier refreshes, for rows/s)."""
    from ftrl_ps.ps.overview import Overview

    o = Overview.from_clock(status0.get("clock"))
    history.sample(o.rows, o.loss_sum)
    return "cluster: " + o.line(history.rate(window=10.0))


def cluster_record(status0: dict[str, Any], history: Any) -> dict[str, Any]:
    """The cluster line of ``--watch`` as a JSON-able dict (``--watch --json``)."""
    from ftrl_ps.ps.overview import Overview

    o = Overview.from_clock(status0.get("clock"))
    history.sample(o.rows, o.loss_sum)
    return {"rows": o.rows, "rows_per_second": history.rate(window=10.0),
            "logloss": o.progressive_logloss if o.rows else None,
            "min_clock": o.min_clock, "max_clock": o.max_clock, "restarts": o.restarts,
            "states": o.states, "missing_indices": o.missing}


def watch(client: Any, count: int, seconds: float, out: TextIO, *,
          as_json: bool = False) -> None:
    """Redraw the summary every ``seconds`` until Ctrl-C (in place on a terminal);
    ``as_json``: write one JSON object per refresh instead (JSON lines)."""
    from ftrl_ps.ps.overview import History

    tty = bool(getattr(out, "isatty", lambda: False)())
    history = History(maxlen=64)
    while True:
        now = time.time()
        answers = statuses(client, count)
        status0 = None if isinstance(answers[0], FTRLPSError) else answers[0]
        if as_json:
            cluster = None if status0 is None else cluster_record(status0, history)
            out.write(json.dumps({"time": round(now, 3), "cluster": cluster,
                                  "shards": _json_answers(answers)}, sort_keys=True) + "\n")
        else:
            lines = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
                     + f"  (every {seconds:g} s, Ctrl-C stops)"]
            if status0 is not None:
                lines.append(cluster_line(status0, history))
            lines.extend(_lines(answers))
            text = "\n".join(lines) + "\n"
            out.write(("\x1b[H\x1b[2J" + text) if tty else (text + "\n"))
        out.flush()
        time.sleep(seconds)


class _Statuses:
    """Each shard's ``/v1/status`` on its own (not a ``PSClient``, which asks every
    shard for the layout first: one shard down would hide all of them)."""

    def __init__(self, urls: list[str], token: str | None) -> None:
        from ftrl_ps.ps.shards import ShardConnections

        self._net = ShardConnections(urls, token=token, timeout=30.0, retries=3,
                                     retry_seconds=2.0)

    def status(self, shard: int) -> dict[str, Any]:
        answer: dict[str, Any] = self._net.request(shard, "GET", "/v1/status").json()
        return answer

    def close(self) -> None:
        self._net.close()


def statuses(client: Any, count: int) -> list[dict[str, Any] | FTRLPSError]:
    """Each shard's status, or why it could not be read: a shard that is down
    does not hide what the others say."""
    answers: list[dict[str, Any] | FTRLPSError] = []
    for i in range(count):
        try:
            answers.append(client.status(i))
        except FTRLPSError as exc:
            answers.append(exc)
    return answers


def _json_answers(answers: list[dict[str, Any] | FTRLPSError]) -> list[dict[str, Any]]:
    """What ``--json`` prints: each shard's status, ``{"shard": i, "error": why}`` for
    a shard that did not answer."""
    return [{"shard": i, "error": str(a)} if isinstance(a, FTRLPSError) else a
            for i, a in enumerate(answers)]


def _lines(answers: list[dict[str, Any] | FTRLPSError]) -> list[str]:
    lines: list[str] = []
    for i, status in enumerate(answers):
        if isinstance(status, FTRLPSError):
            lines.append(f"shard {i}: cannot read its status: {status}")
        else:
            lines.extend(summary(i, status))
    return lines


def run(args: argparse.Namespace) -> int:
    from ftrl_ps.ps.worker_main import parse_urls

    urls = parse_urls(args.server)
    client = _Statuses(urls, resolve_token(args.token))
    try:
        if args.watch is not None:
            try:
                watch(client, len(urls), args.watch, sys.stdout, as_json=args.json)
            except KeyboardInterrupt:
                return 0
        answers = statuses(client, len(urls))
    finally:
        client.close()
    if args.json:  # an unreachable shard: {"shard": i, "error": why}
        json.dump(_json_answers(answers), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print("\n".join(_lines(answers)))
    return 1 if any(isinstance(a, FTRLPSError) for a in answers) else 0
