"""Scale benchmark (issue 12 item 6): a long generated run, watched from outside.

Usage::

    python benchmarks/bench_scale.py [--mode single|cluster] [--rows 20000000] [--bits 26]
                                     [--data DIR | --data-dir DIR] [--delete-data]
                                     [--interval 0.2] [--warm-memory GIB] [--warm-run]
                                     [--json OUT]
                                     [-- EXTRA TRAIN FLAGS]

Steps:

1. Data: ``ftrl-ps gen`` (the project's generator) writes ``train.svm`` /
   ``test.svm`` into ``--data`` (default ``DATA_DIR/scale_r{rows}_b{bits}_s{seed}``,
   ``DATA_DIR`` = ``benchmarks/.data``, git-ignored), unless it is there already.
   20M rows are about 7 GB of text at ``--bits 26``; ``--delete-data`` removes
   the folder at the end. Before the timed run the training file is read once
   (``--no-warm-cache``: not), so that the run reads it from the page cache:
   this host evicts a big file's cold pages, and a run that read ~4 of its 7 GB
   from the disk took twice as long, its last tenth at 0.57x its first.
   With ``--warm-memory GIB`` it then faults in and frees that much memory,
   right before the run: on this VM memory the hypervisor took back costs ~3 ms
   per MiB at its first touch, paid in the run's first tenth otherwise
   (``_harness.warm_memory``). That works only part of the time, as the VM
   hands freed memory back within seconds; ``--warm-run`` runs the same
   command once, unmeasured, right before the measured run instead, which
   then finds backed the memory it touches first (RESULTS.md, session 35:
   the cluster's last/first tenth 1.04-1.12 right after another run, 1.22-1.82
   otherwise, the same code). Its output goes beside the run's (``.warm.log``).
2. Training, one pass, as a user runs it: ``--mode single`` runs ``ftrl-ps
   train TRAIN --bits B`` (one process); ``--mode cluster`` runs it with
   ``--servers S --workers W`` (a local cluster: servers and workers are child
   processes of the command).
3. While it runs, every ``--interval`` seconds, the script samples (psutil)
   the resident memory of every process of the run, and (single mode) the
   position of the training file in the trainer's open files: the reader runs
   at most a few 4 MiB chunks ahead of the trainer (a bounded queue), so the
   position over time gives the rows/s of the run at any moment (rows are
   spread evenly over the generated file).

Nothing but the generated data is written into ``--data`` (it may be shared, or
read-only): the run's output (``bench_scale_{mode}.log``) and, in cluster mode,
the workers' reports (``bench_scale_workers.json``) go next to ``--json``
(``OUT.log``, ``OUT.workers.json``), else into a new temporary folder, kept and
named on stderr and in the output. The row count is the file's (its
``truth.json``, else counted), whatever ``--rows`` says when ``--data`` exists.

Reported: wall time and rows/s of the whole run; rows/s over the first and
the last tenth of the training file (goal: within 10 %); RSS of each process
at 20 %, 50 % and 100 % of the run and its peak (goal: flat after warm-up,
i.e. the growth from 20 % to the end small against the state's size).

Cluster mode samples the RSS of the servers and workers the same way. Each
worker reads its own byte range of the file front to back (the launcher's
``--split shares``, its default for one plain file), so the bytes read so far
are the sum over the workers of how far each has moved from where it was first
seen (a finished worker keeps its last position): the first/last-tenth figures
are computed from that sum as in single mode. (With ``--split units`` a worker jumps
between hand-out units and that sum is meaningless; the tenths of the rows
trained below still hold.)

The file position counts rows *read*: a worker reads its first rows while the
servers start, so the first tenth by the file also holds the servers' start.
Cluster mode therefore also reports the tenths by rows *trained*, from the
``timeline`` of each worker's ``--metrics-json`` report (wall clock and rows
trained at the start of every round and the end of every step): the rows all
workers had trained at any moment are the sum of each one's, linear between
its points, from the first worker's first point to the last worker's last.
(Shard 0's ``/v1/status`` counts a worker's rows only at its clock ticks, up to
a push behind: tenths from it ended late at the start and began late at the
end, which raised last/first by ~0.2-0.3 at 20M rows; RESULTS.md, session 18.)
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

#: fractions of the run at which RSS is reported
RSS_POINTS = (0.2, 0.5, 1.0)


def _parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("single", "cluster"), default="single",
                   help="one process (default) or a local cluster (--servers, --workers)")
    p.add_argument("--rows", type=h.int_at_least(10), default=20_000_000,
                   help="training rows generated, at least 10 (default 2e7)")
    p.add_argument("--test-rows", type=h.positive_int, default=100_000,
                   help="test rows (default 1e5)")
    p.add_argument("--bits", type=h.positive_int, default=26,
                   help="hash bits of data and model (26)")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--data", type=Path, help="folder with train.svm (made by ftrl-ps gen if "
                   "missing); default DATA_DIR/scale_r{rows}_b{bits}_s{seed}")
    p.add_argument("--data-dir", type=Path, default=h.DEFAULT_DATA_DIR,
                   help="parent of the default --data folder (default benchmarks/.data)")
    p.add_argument("--delete-data", action="store_true", help="delete --data at the end")
    p.add_argument("--servers", type=h.positive_int, default=2,
                   help="cluster mode: shards (default 2)")
    p.add_argument("--workers", type=h.positive_int, default=2,
                   help="cluster mode: workers (default 2)")
    p.add_argument("--interval", type=h.positive_float, default=0.2,
                   help="sampling period, seconds")
    p.add_argument("--no-warm-cache", action="store_true",
                   help="do not read the training file once before the run (by default it "
                        "is, so that the run reads it from the page cache, not the disk)")
    p.add_argument("--warm-memory", type=h.non_negative_float, default=0.0, metavar="GIB",
                   help="fault in and free GIB GiB of memory right before the run, so that "
                        "it does not pay this VM's first touch of memory the hypervisor "
                        "took back (_harness.warm_memory; default 0: it does)")
    p.add_argument("--warm-run", action="store_true",
                   help="run the same command once, unmeasured, right before the measured "
                        "run (after --warm-memory, if given), so that the memory the run "
                        "touches first was just used: this VM hands freed memory back to "
                        "its host within seconds, and a first touch of such memory costs "
                        "~13 us a page against 1.4-2 us (RESULTS.md, session 35)")
    p.add_argument("--json", type=Path, help="also write the results (and samples) here; "
                   "the run's log and the workers' reports go beside it (OUT.log, "
                   "OUT.workers.json), else into a temporary folder")
    p.add_argument("--ftrl-ps-cmd", default=f"{shlex.quote(sys.executable)} -m ftrl_ps",
                   help="command prefix that runs ftrl-ps (default: this python -m ftrl_ps)")
    args, extra = p.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    given = h.reserved_given(extra, RESERVED)
    if given:
        p.error(f"{', '.join(given)} is set by this benchmark (not after --)")
    return args, extra


#: ``ftrl-ps train`` options the benchmark sets itself (not among the flags after ``--``)
RESERVED = ("--bits", "--epochs", "--servers", "--workers", "--metrics-json")


def rows_in(folder: Path, train: Path) -> int:
    """The training rows of ``folder``: its ``truth.json`` (``ftrl-ps gen``'s), else counted."""
    truth = folder / "truth.json"
    try:
        return int(json.loads(truth.read_text())["config"]["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return h.count_rows(train)


def output_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """The run's log and the workers' reports: beside ``--json``, else in a new
    temporary folder (kept: the log is the run's whole output), never in ``--data``."""
    if args.json:
        base = args.json.with_suffix("")
        return base.with_name(base.name + ".log"), base.with_name(base.name + ".workers.json")
    folder = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    return folder / f"bench_scale_{args.mode}.log", folder / "bench_scale_workers.json"


def ensure_data(args: argparse.Namespace) -> Path:
    folder = args.data or args.data_dir / f"scale_r{args.rows}_b{args.bits}_s{args.seed}"
    if not (folder / "train.svm").exists():
        cmd = [*shlex.split(args.ftrl_ps_cmd), "gen", str(folder), "--rows", str(args.rows),
               "--test-rows", str(args.test_rows), "--bits", str(args.bits),
               "--seed", str(args.seed), "--quiet"]
        print(f"generating {folder} ({args.rows:,} rows)", file=sys.stderr)
        t = time.perf_counter()
        subprocess.run(cmd, check=True)
        print(f"generated in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return folder


def _file_position(proc: psutil.Process, path: str) -> int | None:
    """Largest read position of ``path`` among the open files of ``proc`` (None if shut)."""
    try:
        positions = [f.position for f in proc.open_files() if f.path == path]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return max(positions) if positions else None


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _role(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
        name = proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    if name.startswith("ftrl-"):  # a forked server or worker names itself (prctl)
        return f"{name}:{proc.pid}"
    for role in ("server", "worker"):
        if role in cmd or any(part.endswith(f"ftrl-ps-{role}") for part in cmd):
            return f"{role}:{proc.pid}"
    return f"main:{proc.pid}" if "train" in cmd else f"other:{proc.pid}"


def watch(cmd: list[str], train: Path, interval: float, log: Path) -> dict[str, Any]:
    """Run ``cmd``; sample RSS and CPU of its process tree and the train file position."""
    samples: list[dict[str, Any]] = []
    path = str(train.resolve())
    # cluster: per worker pid, the first and the last file position seen
    first_pos: dict[int, int] = {}
    last_pos: dict[int, int] = {}
    with open(log, "wb") as out:
        start = time.perf_counter()
        epoch = time.time()  # the workers' reports give wall clocks
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        # CPU seconds by pid, last seen: a worker that has finished keeps counting
        # (summing live processes only made the total drop when one exited)
        cpu_by_pid: dict[int, float] = {}
        role_of: dict[int, str] = {}
        while child.poll() is None:
            now = time.perf_counter() - start
            rss: dict[str, float] = {}
            for p in _tree(proc):
                try:
                    resident = p.memory_info().rss
                    if resident == 0:  # exited, not yet reaped
                        continue
                    role = _role(p)
                    rss[role] = resident / 2**20
                    times = p.cpu_times()
                    cpu_by_pid[p.pid] = times.user + times.system
                    role_of[p.pid] = role
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if "worker" in role:
                    at = _file_position(p, path)
                    if at is not None:
                        first_pos.setdefault(p.pid, at)
                        last_pos[p.pid] = at
            pos = _file_position(proc, path)
            if pos is None and last_pos:  # cluster: bytes the workers have read so far
                pos = sum(last_pos[k] - first_pos[k] for k in last_pos)
            sample = {"t": now, "pos": pos, "rss_mib": rss, "cpu": sum(cpu_by_pid.values()),
                      "cpu_by_role": {role_of[k]: round(v, 3) for k, v in cpu_by_pid.items()}}
            samples.append(sample)
            time.sleep(interval)
        wall = time.perf_counter() - start
    if child.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"{shlex.join(cmd)} failed ({child.returncode}):\n" + "\n".join(tail))
    return {"wall_seconds": wall, "samples": samples, "epoch": epoch}


def _time_at(samples: list[dict[str, Any]], pos: float, clock: str = "t",
             key: str = "pos") -> float | None:
    """First time (``clock``: ``"t"`` wall, ``"cpu"`` CPU seconds of the run's
    processes) the file position (``key``: or another count that only grows)
    reached ``pos`` (linear between samples)."""
    prev = None
    for s in samples:
        if s[key] is None:
            continue
        if s[key] >= pos:
            if prev is None or s[key] == prev[key]:
                return float(s[clock])
            frac = (pos - prev[key]) / (s[key] - prev[key])
            return float(prev[clock] + frac * (s[clock] - prev[clock]))
        prev = s
    return None


def trained_tenths(epoch: float, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows/s over each tenth of the rows *trained*, from the workers' own
    ``timeline`` (``[wall clock, rows]`` at the start of every round and the end of
    every step, in their reports): the rows trained by all workers at any time
    are the sum of each worker's, linear between its points, so a tenth ends
    within a step of where it really did (cluster mode; empty when a report has
    no timeline).

    >>> reports = [{"timeline": [[101.0, 0], [103.0, 200], [106.0, 500]]},
    ...            {"timeline": [[102.0, 0], [106.0, 500]]}]
    >>> r = trained_tenths(100.0, reports)
    >>> r["first_tenth_trained_rows_per_s"], round(r["last_tenth_trained_rows_per_s"], 1)
    (100.0, 225.0)
    """
    lines = [np.array(rep.get("timeline") or [], dtype=float).reshape(-1, 2)
             for rep in reports]
    if not lines or not all(line.size for line in lines):
        return {}
    # rows since each worker's first point (a restarted worker begins at its resumed rows)
    total = float(sum(line[-1, 1] - line[0, 1] for line in lines))
    if total <= 0:
        return {}
    times = np.unique(np.concatenate([line[:, 0] for line in lines]))
    trained = np.zeros_like(times)
    for line in lines:  # 0 before the worker's first point, its total after its last
        trained += np.interp(times, line[:, 0], line[:, 1] - line[0, 1], left=0.0)
    curve = [{"t": t - epoch, "rows": r} for t, r in zip(times.tolist(), trained.tolist(),
                                                          strict=True)]
    reached = [_time_at(curve, k * total / 10, key="rows") for k in range(1, 11)]
    marks = [curve[0]["t"], *(curve[-1]["t"] if t is None else t for t in reached)]
    rates = [0.1 * total / max(b - a, 1e-9) for a, b in pairwise(marks)]
    return {"first_tenth_trained_rows_per_s": rates[0],
            "last_tenth_trained_rows_per_s": rates[-1],
            "trained_last_over_first": rates[-1] / rates[0],
            "trained_seconds": curve[-1]["t"] - curve[0]["t"],
            "trained_rows_per_s_by_tenth": rates}


def summarize(run: dict[str, Any], size: int, rows: int) -> dict[str, Any]:
    samples = run["samples"]
    result: dict[str, Any] = {"wall_seconds": run["wall_seconds"],
                              "rows_per_s_wall": rows / run["wall_seconds"]}
    seen = [s for s in samples if s["pos"] is not None]
    if seen:
        # the first tenth starts where the file was first seen open, the last ends
        # where it was last seen (the reader may be a chunk in, or the file shut
        # between two samples); both windows are a tenth of the file
        p0, t0 = seen[0]["pos"], seen[0]["t"]
        p1 = seen[-1]["pos"]
        t = {"a": _time_at(samples, p0 + 0.1 * size),
             "b": _time_at(samples, p1 - 0.1 * size), "c": _time_at(samples, p1)}
        if all(v is not None for v in t.values()) and p0 < 0.05 * size and p1 > 0.95 * size:
            first = 0.1 * rows / max(t["a"] - t0, 1e-9)  # type: ignore[operator]
            last = 0.1 * rows / max(t["c"] - t["b"], 1e-9)  # type: ignore[operator]
            result.update(first_tenth_rows_per_s=first, last_tenth_rows_per_s=last,
                          last_over_first=last / first,
                          read_seconds=t["c"] - t0)  # type: ignore[operator]
            # the same per CPU second: the work per row, whatever share of the cores
            # a loaded machine gave the run
            c0 = seen[0]["cpu"]
            c = {k: _time_at(samples, v, "cpu") for k, v in
                 (("a", p0 + 0.1 * size), ("b", p1 - 0.1 * size), ("c", p1))}
            cpu_first = 0.1 * rows / max(c["a"] - c0, 1e-9)  # type: ignore[operator]
            cpu_last = 0.1 * rows / max(c["c"] - c["b"], 1e-9)  # type: ignore[operator]
            result.update(first_tenth_rows_per_cpu_s=cpu_first,
                          last_tenth_rows_per_cpu_s=cpu_last,
                          cpu_last_over_first=cpu_last / cpu_first)
    if run.get("reports"):
        result.update(trained_tenths(run["epoch"], run["reports"]))
    # RSS by process at fractions of the run (by time: the cluster has no file position)
    end = samples[-1]["t"] if samples else 0.0
    roles = sorted({r for s in samples for r in s["rss_mib"] if r != "?"})
    rss: dict[str, dict[str, float | None]] = {}
    for role in roles:
        seen = [(s["t"], s["rss_mib"][role]) for s in samples if role in s["rss_mib"]]
        point: dict[str, float | None] = {}
        for f in RSS_POINTS:  # None: the process was not running yet (a short run)
            at = [v for tt, v in seen if tt <= f * end]
            point[f"at_{round(f * 100)}pct"] = at[-1] if at else None
        point["peak"] = max(v for _, v in seen)
        first, last = point["at_20pct"], point["at_100pct"]
        point["growth_after_20pct"] = None if first is None or last is None else last - first
        rss[role] = point
    result["rss_mib"] = rss
    return result


def main(argv: list[str] | None = None) -> int:
    args, extra = _parse_args(argv)
    folder = ensure_data(args)
    train = folder / "train.svm"
    size = train.stat().st_size
    rows = rows_in(folder, train)
    if rows != args.rows:
        print(f"{folder} holds {rows:,} training rows, not --rows {args.rows:,}: the figures "
              f"are per {rows:,} rows", file=sys.stderr)
    prefix = shlex.split(args.ftrl_ps_cmd)
    cmd = [*prefix, "train", str(train), "--bits", str(args.bits), "--epochs", "1"]
    log, reports = output_paths(args)
    print(f"the run's output: {log}", file=sys.stderr)
    if args.mode == "cluster":
        cmd += ["--servers", str(args.servers), "--workers", str(args.workers),
                "--metrics-json", str(reports)]
        reports.unlink(missing_ok=True)  # an earlier run's reports are not this run's
    cmd += extra
    warmed = None
    if not args.no_warm_cache:
        seconds, nbytes = h.warm_page_cache(train)
        warmed = {"seconds": seconds, "bytes": nbytes}
        print(f"page cache: read {train} once, {nbytes / 1e9:.1f} GB in {seconds:.1f} s",
              file=sys.stderr)
    memory = None
    if args.warm_memory > 0:  # last, right before the run (the host takes it back in ~2 s)
        memory = {"gib": args.warm_memory, "seconds": h.warm_memory(args.warm_memory)}
        print(f"memory: {args.warm_memory:g} GiB faulted in and freed in "
              f"{memory['seconds']:.1f} s", file=sys.stderr)
    warm_run = None
    if args.warm_run:
        warm_run = _warm_run(cmd, log.with_name(log.stem + ".warm" + log.suffix))
        if warm_run["returncode"] != 0:
            print(f"the warm-up run failed (exit {warm_run['returncode']}; its output: "
                  f"{warm_run['log']}): no measured run", file=sys.stderr)
            return 1
        reports.unlink(missing_ok=True)  # the measured run's reports only
    print(f"$ {shlex.join(cmd)}", file=sys.stderr)
    load_before = psutil.getloadavg()
    run = watch(cmd, train, args.interval, log)
    if args.mode == "cluster":
        run["reports"] = json.loads(reports.read_text()).get("worker_reports", [])
    result = {"mode": args.mode, "rows": rows, "bits": args.bits, "command": shlex.join(cmd),
              "file_bytes": size, "page_cache_warmed": warmed, "memory_warmed": memory,
              "warm_run": warm_run,
              "load_average_before": load_before,
              "load_average_after": psutil.getloadavg(), "log": str(log),
              **summarize(run, size, rows)}
    result["train_output"] = log.read_text(errors="replace").splitlines()[-6:]
    _print(result)
    if args.json:
        args.json.write_text(json.dumps({**result, "samples": run["samples"]}, indent=1) + "\n")
    if args.delete_data:
        shutil.rmtree(folder)
    return 0


def _warm_run(cmd: list[str], log: Path) -> dict[str, Any]:
    """Run ``cmd`` once, its output into ``log``, unmeasured (``--warm-run``)."""
    print(f"warm-up run (not measured; its output: {log}): $ {shlex.join(cmd)}",
          file=sys.stderr)
    start = time.perf_counter()
    with log.open("wb") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.perf_counter() - start
    print(f"warm-up run: exit {rc} in {seconds:.1f} s", file=sys.stderr)
    return {"seconds": seconds, "returncode": rc, "log": str(log)}


def _print(r: dict[str, Any]) -> None:
    print(f"\n{r['mode']}: {r['rows']:,} rows, 2^{r['bits']} slots, one pass: "
          f"{r['wall_seconds']:.1f} s wall, {r['rows_per_s_wall']:,.0f} rows/s (start-up "
          f"included)")
    if "last_over_first" in r:
        print(f"rows/s over the first tenth of the file {r['first_tenth_rows_per_s']:,.0f}, "
              f"over the last tenth {r['last_tenth_rows_per_s']:,.0f} "
              f"(last/first {r['last_over_first']:.3f}; goal within 10 %)")
        print(f"rows per CPU second (user + system) over the first tenth "
              f"{r['first_tenth_rows_per_cpu_s']:,.0f}, over the last tenth "
              f"{r['last_tenth_rows_per_cpu_s']:,.0f} "
              f"(last/first {r['cpu_last_over_first']:.3f})")
    if "trained_last_over_first" in r:
        print(f"rows/s over the first tenth of the rows trained "
              f"{r['first_tenth_trained_rows_per_s']:,.0f}, over the last tenth "
              f"{r['last_tenth_trained_rows_per_s']:,.0f} "
              f"(last/first {r['trained_last_over_first']:.3f}; the workers' timelines, "
              f"first point to last {r['trained_seconds']:.1f} s)")
        print("rows/s by tenth of the rows trained: " + ", ".join(
            f"{v / 1000:,.0f}k" for v in r["trained_rows_per_s_by_tenth"]))
    if r["mode"] == "cluster" and "trained_last_over_first" not in r:
        print("rows/s by tenth of the rows trained: no figures (a worker's report has no "
              "timeline: an ftrl-ps from before they had one?)")
    header = ["process", "RSS MiB at 20 %", "at 50 %", "at 100 %", "peak", "growth after 20 %"]
    rows = [[role, *(_mib(p[k]) for k in ("at_20pct", "at_50pct", "at_100pct", "peak")),
             _mib(p["growth_after_20pct"], "+")] for role, p in r["rss_mib"].items()]
    print(h.format_table(header, rows))
    if any(None in p.values() for p in r["rss_mib"].values()):
        print("-: the process was not running yet at that point of the run")
    print("load average before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *r["load_average_before"], *r["load_average_after"]))
    print(f"train output (last lines; all of it in {r['log']}):\n  "
          + "\n  ".join(r["train_output"]))


def _mib(value: float | None, sign: str = "") -> str:
    """An RSS figure in MiB, ``-`` for a point without a sample (not ``nan``)."""
    return "-" if value is None or value != value else f"{value:{sign}.0f}"


if __name__ == "__main__":
    sys.exit(main())
