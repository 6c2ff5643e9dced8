"""Issue 12's goals, side by side, from one run of ``accept_issue12.sh``.

Usage::

    python benchmarks/accept_summary.py OUT     # OUT: the folder accept_issue12.sh wrote

Reads the JSON files the acceptance's benchmarks wrote into ``OUT`` and prints
one row per goal: what was measured, the figure, the goal and whether this run
met it. A benchmark that did not run (or wrote no file) is a row saying so,
not an error. The figures are this run's only: on a host whose speed varies
from hour to hour, one run decides nothing for good (benchmarks/RESULTS.md).

How each goal is judged (issue 12, "What to deliver"):

- 1: every setting's mean over the row orders of (cluster - one process) test
  logloss, each order by the median of its runs, at most +0.001 (the verdict is
  by that mean, not by every run); also shown: orders whose median is above
  +0.001, and the worst single run (flagged when it is above +0.001);
- 3: transient stragglers, pass time at staleness 0 over staleness 3 (medians)
  at least 1.5, and staleness 3's final test logloss within 0.001 of one
  process's;
- 4: wall time with a persistent straggler over the run without (medians) at
  most 1.3;
- 5: a shard's key-values per CPU second at 34,000-key rounds at least 20M;
  one process's wall against Vowpal Wabbit's (medians) at least 2.5x; one
  process's wall over the cluster's at least 0.8 at 1M, 5M and 20M rows (20M:
  the median of the per-round ratios);
- 6: rows/s in the last tenth over the first within 10 % (0.9 to 1.1), one
  process and the cluster (the cluster by the rows trained), each of the two
  runs; the largest RSS growth after 20 % of the run is shown beside it.

The sizes in the rows (``1M rows`` ...) are the rows the JSON files say were
used, not the acceptance's intended sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

#: the goals' thresholds (issue 12)
LOGLOSS_TOLERANCE = 0.001
SSP_SPEEDUP = 1.5
HANDOUT_SLOWDOWN = 1.3
SHARD_MKV_PER_CPU_S = 20.0
SINGLE_VS_VW = 2.5
CLUSTER_VS_SINGLE = 0.8
TENTHS_WITHIN = 0.1

Row = tuple[str, str, str, str, str]  # item, what, figure, goal, verdict


#: printed under the table: how item 1 is judged
ITEM1_NOTE = ("item 1: the verdict is by the worst setting's mean over the row orders (each "
              "order by the median of its runs), not by every single run: a single run may be "
              "above +0.001 when the row is 'met' (its figure shows the worst single run)")


def _size(data: dict[str, Any]) -> str:
    """``1M rows``, ``50k rows``: the rows a benchmark's JSON says it used.

    >>> _size({"rows": 5_000_000}), _size({"rows": 50_000}), _size({"rows": 1_250_000})
    ('5M rows', '50k rows', '1.25M rows')
    >>> _size({})
    'rows not recorded'
    """
    rows = data.get("rows")
    if not isinstance(rows, int):
        return "rows not recorded"
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if rows >= scale:
            return f"{rows / scale:g}{unit} rows"
    return f"{rows} rows"


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def _load(out: Path, name: str) -> Any:
    """The JSON in ``out/name`` (None if there is no such file; ValueError if it
    is not JSON, e.g. a run cut short)."""
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None


def item1(data: dict[str, Any]) -> list[Row]:
    from bench_merge import order_figures  # the same figures as its own table's

    means: list[tuple[float, str]] = []
    above = orders = 0
    worst = -float("inf")
    for name, result in data.items():
        per_setting: dict[str, list[list[float]]] = {}
        for order in result["orders"].values():
            for setting, diffs in order["cluster"].items():
                per_setting.setdefault(setting, []).append(diffs)
        for setting, per_order in per_setting.items():
            mean, _, worst_run, over, count = order_figures(per_order)
            means.append((mean, f"{name}, {setting}"))
            worst, above, orders = max(worst, worst_run), above + over, orders + count
    top, where = max(means)
    flag = f", above {LOGLOSS_TOLERANCE:+.3f}" if worst > LOGLOSS_TOLERANCE else ""
    return [("1", f"cluster - one process, worst setting's mean over row orders ({where})",
             f"{top:+.4f} ({above} of {orders} order medians above {LOGLOSS_TOLERANCE:+.3f}; "
             f"worst single run {worst:+.4f}{flag})",
             f"mean over orders <= {LOGLOSS_TOLERANCE:+.3f}", _verdict(top <= LOGLOSS_TOLERANCE))]


def item3(data: dict[str, Any]) -> list[Row]:
    def runs(s: str) -> list[dict[str, Any]]:
        return [r for r in data["runs"] if r["scenario"] == "transient" and r["staleness"] == s]

    lockstep, bounded = runs("0"), runs("3")
    speedup = (statistics.median(r["pass_seconds"] for r in lockstep)
               / statistics.median(r["pass_seconds"] for r in bounded))
    final = statistics.median(r["final_logloss"] for r in bounded) - data["one_process"]
    ok = speedup >= SSP_SPEEDUP and final <= LOGLOSS_TOLERANCE
    return [("3", "transient stragglers: pass at s=0 / at s=3; s=3's final test logloss",
             f"{speedup:.2f}x; {final:+.5f} vs one process", f">= {SSP_SPEEDUP}x; "
             f"<= {LOGLOSS_TOLERANCE:+.3f}", _verdict(ok))]


def item4(data: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for cell in data:
        clean = statistics.median(r["wall"] for r in cell["runs"]["clean"])
        slow = statistics.median(r["wall"] for r in cell["runs"]["straggler"])
        rows.append(("4", f"persistent straggler, wall / wall without (s={cell['staleness']}, "
                     f"{cell['split']})", f"{slow / clean:.2f}x ({clean:.2f} -> {slow:.2f} s)",
                     f"<= {HANDOUT_SLOWDOWN}x", _verdict(slow / clean <= HANDOUT_SLOWDOWN)))
    return rows


def item5_shard(data: list[dict[str, Any]]) -> list[Row]:
    cells = [c for c in data if c["keys"] == 34_000 and c["format"] == "binary"]
    if not cells:
        return [("5", "shard at 34,000-key rounds", "no such cell", "", "not run")]
    mkv = cells[0]["server_mkv_per_cpu_s"]
    return [("5", "shard: key-values per CPU second, 34,000-key rounds", f"{mkv:.1f}M",
             f">= {SHARD_MKV_PER_CPU_S:.0f}M", _verdict(mkv >= SHARD_MKV_PER_CPU_S))]


def item5_cluster(data: dict[str, Any], with_vw: bool) -> list[Row]:
    label = _size(data)
    single = data["single"]["wall_seconds"]
    rows = []
    if with_vw:
        ratio = data["vw"]["wall_seconds"] / single
        rows.append(("5", f"one process vs Vowpal Wabbit, {label} (median walls)",
                     f"{ratio:.2f}x ({single:.2f} against {data['vw']['wall_seconds']:.2f} s)",
                     f">= {SINGLE_VS_VW}x", _verdict(ratio >= SINGLE_VS_VW)))
    for cluster in data["clusters"]:
        ratio = single / cluster["wall_seconds"]
        rows.append(("5", f"1 server + {cluster['workers']} workers vs one process, {label}",
                     f"{ratio:.2f}x ({cluster['wall_seconds']:.2f} against {single:.2f} s)",
                     f">= {CLUSTER_VS_SINGLE}x", _verdict(ratio >= CLUSTER_VS_SINGLE)))
    return rows


def item5_20m(data: dict[str, Any]) -> list[Row]:
    rows = []
    for name, modes in data["trees"].items():
        ratios = [s["wall_seconds"] / c["wall_seconds"]
                  for s, c in zip(modes["single"], modes["cluster"], strict=True)]
        median = statistics.median(ratios)
        rows.append(("5", f"1 server + 2 workers vs one process, {_size(data)} ({name})",
                     f"{median:.2f}x (rounds {' / '.join(f'{r:.2f}' for r in ratios)})",
                     f">= {CLUSTER_VS_SINGLE}x", _verdict(median >= CLUSTER_VS_SINGLE)))
    return rows


def item6(data: dict[str, Any], label: str) -> list[Row]:
    ratio = data.get("trained_last_over_first") or data["last_over_first"]
    by = "rows trained" if data.get("trained_last_over_first") else "the file's tenths"
    # a process not yet running at 20 % of the run has no growth (None; nan before)
    growths = [g for p in data["rss_mib"].values()
               if (g := p.get("growth_after_20pct")) is not None and g == g]
    growth = f"{max(growths):+.0f} MiB" if growths else "n/a"
    warmed = ("after a warm-up run" if data.get("warm_run") else
              "memory warmed" if data.get("memory_warmed") else "as the machine was")
    ok = abs(ratio - 1.0) <= TENTHS_WITHIN
    return [("6", f"{label}, {_size(data)}, {warmed}: last tenth / first ({by})",
             f"{ratio:.3f} (largest RSS growth after 20 %: {growth})",
             f"{1 - TENTHS_WITHIN:.1f} to {1 + TENTHS_WITHIN:.1f}", _verdict(ok))]


#: (JSON file in OUT, the item, what it is, how to read it)
SOURCES: tuple[tuple[str, str, str, Callable[[Any], list[Row]]], ...] = (
    ("item1.json", "1", "bench_merge.py", item1),
    ("item3.json", "3", "bench_ssp.py", item3),
    ("item4.json", "4", "bench_handout.py", item4),
    ("shard.json", "5", "shard (bench_wire.py)", item5_shard),
    ("item5.json", "5", "bench_cluster.py (accept_issue12.sh: 1M rows)",
     lambda d: item5_cluster(d, True)),
    ("item5_5m.json", "5", "bench_cluster.py (accept_issue12.sh: 5M rows)",
     lambda d: item5_cluster(d, True)),
    ("item5_20m.json", "5", "bench_cluster_cpu.py (accept_issue12.sh: 20M rows)", item5_20m),
    ("item6_single_1.json", "6", "bench_scale.py", lambda d: item6(d, "one process, run 1")),
    ("item6_cluster_1.json", "6", "bench_scale.py",
     lambda d: item6(d, "2 shards + 2 workers, run 1")),
    ("item6_single_2.json", "6", "bench_scale.py", lambda d: item6(d, "one process, run 2")),
    ("item6_cluster_2.json", "6", "bench_scale.py",
     lambda d: item6(d, "2 shards + 2 workers, run 2")),
)


def summary(out: Path) -> list[Row]:
    """Every goal's row, in the issue's order of items."""
    rows: list[Row] = []
    for name, item, what, read in SOURCES:
        try:
            data = _load(out, name)
            if data is None:
                rows.append((item, what, f"no {name}", "", "not run"))
                continue
            rows.extend(read(data))
        except (OSError, KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
            rows.append((item, what, f"{name} unreadable: {exc!r}", "", "not run"))
    return sorted(rows, key=lambda r: r[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the folder accept_issue12.sh wrote")
    args = p.parse_args(argv)
    if not args.out.is_dir():
        p.error(f"{args.out} is not a folder")
    header = ("item", "what", "figure", "goal", "this run")
    rows = summary(args.out)
    print(h.format_table(header, rows, text=len(header)))
    if any(r[0] == "1" and r[4] != "not run" for r in rows):
        print(f"\n{ITEM1_NOTE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
