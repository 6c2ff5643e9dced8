"""Where a local cluster's time goes: wall, CPU seconds per process, checkouts interleaved.

Usage::

    python benchmarks/bench_cluster_cpu.py --tree main=/work/main --tree new=. \\
        [--data DIR] [--repeat 3] [--workers 2] [--staleness 3] [--extra "--batch-size 10000"]

For every round and every checkout (``NAME=PATH``, one or more: PATH must hold
``ftrl_ps/__init__.py``, and every NAME must differ; each runs with
``PYTHONPATH=PATH`` from a neutral folder, and before any run a child started
that way must import ``ftrl_ps`` from PATH, so the checkout's code is what runs,
not the one installed in the venv) it times
``ftrl-ps train DIR/train.svm`` in one process and as a local cluster (1 server +
``--workers`` workers), then scores each model on ``DIR/test.svm`` with
``ftrl-ps eval`` (not timed). Per run it prints the wall time, the CPU seconds
(user + system) of the command and every process it started
(``RUSAGE_CHILDREN``), and each process as ``name@start:cpu`` (psutil, sampled
every 10 ms: when it appeared, seconds after the start, and its CPU seconds);
then the medians and the single/cluster wall ratio of every round. ``DIR``
defaults to ``bench_single.py``'s cached 1M-row set in ``benchmarks/.data``.

With ``--warm-memory GIB`` that much memory is faulted in and freed right before
every timed run (``_harness.warm_memory``): on a VM that takes idle memory back,
whichever run follows a pause otherwise pays for faulting its memory in cold
(at 20M rows, ``--bits 26``, seconds of system time), so the order of the runs
would decide part of the ratio.

With ``--detail`` every run also prints each process's user and system CPU
seconds, minor page faults and peak RSS (sampled the same way), one line per
process: on a VM that takes idle memory back, a shard's system time is what
shows whether its state's first touch was paid again (RESULTS, session 24).

With ``--functions`` every cluster run also goes through ``_cpu_by_function.py``
and each worker's CPU seconds by step are printed (parse, key numbering, fit,
pull, push payload, push, tick: thread CPU time, not wall time on shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness as h  # noqa: E402

DEFAULT_DATA = HERE / ".data" / "synth_r1000000_t100000_b22_s0"


#: ``ftrl-ps train`` options the benchmark sets itself (not in ``--extra``)
RESERVED = ("--workers", "--staleness", "--bits", "--model")


def _tree(spec: str) -> tuple[str, Path]:
    """``--tree NAME=PATH``: PATH must be a checkout of ftrl-ps (``PATH/ftrl_ps/``), or
    ``PYTHONPATH=PATH`` would silently run the ftrl-ps installed in the venv."""
    name, sep, path = spec.partition("=")
    if not (sep and name and path):
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {spec!r}")
    root = Path(path).expanduser().resolve()
    if not (root / "ftrl_ps" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(
            f"{spec!r}: {root} is not a checkout of ftrl-ps (no ftrl_ps/__init__.py in it)")
    return name, root


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=h.HelpFormatter)
    p.add_argument("--tree", action="append", required=True, metavar="NAME=PATH", type=_tree,
                   help="a checkout to time, PATH holding ftrl_ps/ (repeat it, with another "
                        "NAME, to compare checkouts)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="folder with train.svm and test.svm")
    p.add_argument("--repeat", type=h.positive_int, default=3,
                   help="rounds, each timing every checkout in turn (default %(default)s)")
    p.add_argument("--workers", type=h.positive_int, default=2,
                   help="workers of the cluster runs, with 1 server (default %(default)s)")
    p.add_argument("--staleness", default="3", type=h.staleness_arg,
                   help="SSP staleness of the cluster runs, 0..N or inf (default %(default)s)")
    p.add_argument("--bits", type=h.positive_int, default=22,
                   help="hash bits of every model (ftrl-ps train --bits; default %(default)s)")
    p.add_argument("--extra", default="",
                   help="more flags for the cluster runs' 'ftrl-ps train', in one argument: "
                        "--extra=--adaptive-rounds, or --extra '--batch-size 10000'")
    p.add_argument("--no-single", action="store_true", help="time the clusters only")
    p.add_argument("--no-warm-cache", action="store_true",
                   help="do not read the training file before every timed run (by default "
                        "it is, so that no run reads it from the disk: _harness.warm_page_cache)")
    p.add_argument("--warm-memory", type=h.non_negative_float, default=0.0, metavar="GIB",
                   help="fault in and free this much memory right before every timed run "
                        "(default 0: none)")
    p.add_argument("--detail", action="store_true",
                   help="also print each process's user and system CPU, page faults and "
                        "peak RSS")
    p.add_argument("--functions", action="store_true",
                   help="also account each worker's CPU by step (_cpu_by_function.py)")
    p.add_argument("--json", type=Path,
                   help="also write every run's wall, CPU and test logloss, per checkout and "
                        "mode, in round order, to this file")
    args = p.parse_args(argv)
    names = [name for name, _ in args.tree]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        p.error(f"--tree: the name {', '.join(twice)} is given twice (one NAME per checkout)")
    given = h.reserved_given(shlex.split(args.extra), RESERVED)
    if given:
        p.error(f"--extra: {', '.join(given)} is set by this benchmark (not in --extra)")
    return args


def _ftrl_ps_of(tree: Path, cwd: Path) -> Path:
    """Where a child run as the benchmark runs them (``PYTHONPATH=tree``, from ``cwd``)
    imports ``ftrl_ps`` from."""
    res = subprocess.run([sys.executable, "-c", "import ftrl_ps; print(ftrl_ps.__file__)"],
                         env=dict(os.environ, PYTHONPATH=str(tree)), cwd=cwd,
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"cannot import ftrl_ps from {tree}:\n{res.stderr[-2000:]}")
    return Path(res.stdout.strip()).resolve()


def _minor_faults(pid: int) -> int:
    """Minor page faults of a process so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class _Seen:
    """What was last sampled of one process (``start``: seconds after the command's)."""

    name: str
    start: float
    user: float = 0.0
    system: float = 0.0
    faults: int = 0
    peak_rss_mib: int = 0

    def sample(self, q: psutil.Process) -> None:
        times = q.cpu_times()
        self.name, self.user, self.system = q.name(), times.user, times.system
        self.faults = _minor_faults(q.pid)
        self.peak_rss_mib = max(self.peak_rss_mib, q.memory_info().rss >> 20)


def _detail(seen: dict[int, _Seen]) -> str:
    """One line per process: user and system CPU s, minor page faults, peak RSS."""
    return "\n".join(
        f"    {p.name}@{p.start:.2f}: user {p.user:.2f} s  sys {p.system:.2f} s  "
        f"faults {p.faults:,}  peak RSS {p.peak_rss_mib:,} MiB" for p in seen.values())


def _run(tree: Path, cmd: list[str], out: Path) -> tuple[float, float, str, str]:
    """Run ``cmd`` with ``tree`` first on the path; (wall s, CPU s of it and its
    children, ``name@start:cpu`` of every process seen, :func:`_detail` of them)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out.with_suffix(".err"), "wb") as err:
        proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(tree)), cwd=out.parent,
                                stdout=subprocess.DEVNULL, stderr=err)
    seen: dict[int, _Seen] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for q in procs:
            try:
                if q.pid not in seen:
                    seen[q.pid] = _Seen(q.name(), time.perf_counter() - start)
                seen[q.pid].sample(q)
            except psutil.Error:
                pass
        time.sleep(0.01)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(cmd)} failed:\n{out.with_suffix('.err').read_text()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    procs_seen = " ".join(f"{p.name}@{p.start:.2f}:{p.user + p.system:.2f}"
                          for p in seen.values())
    return wall, cpu, procs_seen, _detail(seen)


def _by_function(report: Path) -> str:
    """The workers' lines of a ``_cpu_by_function.py`` report, as a table."""
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    out = []
    for r in rows:
        out.append(f"    worker pid {r['pid']}: process CPU {r['process_cpu']:.2f} s")
        for label, secs in sorted(r["seconds"].items(), key=lambda kv: kv[0].startswith(" ")):
            out.append(f"      {secs:6.3f} s  {r['calls'][label]:5d} calls  {label}")
    return "\n".join(out)


def _logloss(tree: Path, model: Path, test: Path) -> float:
    scored = model.with_suffix(".eval.json")
    subprocess.run([sys.executable, "-m", "ftrl_ps", "eval", str(model), str(test), "--json",
                    str(scored)], env=dict(os.environ, PYTHONPATH=str(tree)), cwd=model.parent,
                   check=True, capture_output=True)
    return float(json.loads(scored.read_text())["logloss"])


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    trees = dict(args.tree)
    train, test = args.data / "train.svm", args.data / "test.svm"
    if not train.is_file() or not test.is_file():
        raise SystemExit(f"{args.data} has no train.svm/test.svm (run bench_single.py once)")
    modes = ["cluster"] if args.no_single else ["single", "cluster"]
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_cluster_cpu_") as tmp:
        work = Path(tmp)
        for name, tree in trees.items():
            found = _ftrl_ps_of(tree, work)
            if not found.is_relative_to(tree):
                raise SystemExit(f"--tree {name}={tree}: a child with PYTHONPATH={tree} "
                                 f"imports ftrl_ps from {found}, not from the checkout")
            print(f"{name}: ftrl_ps from {found.parent}", flush=True)
        for rnd in range(args.repeat):
            for name, tree in trees.items():
                for mode in modes:
                    model = work / f"{name}_{mode}_{rnd}.model"
                    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train), "--bits",
                           str(args.bits), "-q", "--model", str(model)]
                    report = None
                    if mode == "cluster":
                        cmd += ["--workers", str(args.workers), "--staleness", args.staleness,
                                *shlex.split(args.extra)]
                        if args.functions:
                            report = model.with_suffix(".cpu.jsonl")
                            os.environ["FTRL_PS_CPU_REPORT"] = str(report)
                            cmd[1:3] = [str(HERE / "_cpu_by_function.py")]
                    if not args.no_warm_cache:
                        h.warm_page_cache(train)
                    h.warm_memory(args.warm_memory)  # last: the host takes it back in ~2 s
                    wall, cpu, procs, detail = _run(tree, cmd, model)
                    ll = _logloss(tree, model, test)
                    results.setdefault((name, mode), []).append((wall, cpu, ll))
                    print(f"round {rnd + 1} {name:8s} {mode:7s} wall {wall:5.2f} s  "
                          f"cpu {cpu:5.2f} s  test logloss {ll:.5f}  {procs}", flush=True)
                    if args.detail:
                        print(detail, flush=True)
                    if report is not None and report.exists():
                        print(_by_function(report), flush=True)
    print(f"load average at the end: {os.getloadavg()}")
    print("\nmedians:")
    for (name, mode), runs in results.items():
        print(f"  {name:8s} {mode:7s} wall {statistics.median(r[0] for r in runs):5.2f} s  "
              f"cpu {statistics.median(r[1] for r in runs):5.2f} s  "
              f"test logloss {statistics.median(r[2] for r in runs):.5f}")
    if not args.no_single:
        for name in trees:
            ratios = [s[0] / c[0] for s, c in zip(results[name, "single"],
                                                   results[name, "cluster"], strict=True)]
            print(f"  {name}: single wall / cluster wall per round "
                  f"{' '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}")
    if args.json:
        runs_json: dict[str, dict[str, list[dict[str, float]]]] = {}
        for (name, mode), runs in results.items():
            runs_json.setdefault(name, {})[mode] = [
                {"wall_seconds": w, "cpu_seconds": c, "test_logloss": ll} for w, c, ll in runs]
        args.json.write_text(json.dumps({"rows_file": str(train), "bits": args.bits,
                                         "rows": h.count_rows(train),
                                         "trees": runs_json}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
