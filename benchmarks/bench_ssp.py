"""The SSP experiment: what bounded staleness buys when workers straggle.

Usage::

    python benchmarks/bench_ssp.py [--rows 200000] [--staleness 0,1,3,8,inf]
        [--repeat 1] [--scenarios transient,persistent] [--json OUT]

A local cluster of 1 server and 4 workers (``ftrl-ps train --workers 4``) trains
one pass over a generated CTR set (``ftrl-ps gen``, seed 0, cached in
``benchmarks/.data``; 2**20 slots), with injected stragglers
(``ftrl_ps/ps/straggle.py``):

* ``transient``: every worker sleeps 0.3 s before a clock tick with
  probability 0.25 (``--straggle-prob 0.25 --straggle-delay 0.3``);
* ``persistent``: worker 0 sleeps 0.3 s before every tick
  (``--straggle-workers 0 --straggle-prob 1 --straggle-delay 0.3``).

for staleness 0 (BSP), 1, 3, 8 and inf; the workers read fixed quarters of the
input (``--split shares``) unless ``--split units``, so that only the SSP bound
differs between runs. While a run trains, the model is read
from the server (``GET /v1/state``) every ``--every`` seconds; afterwards
each snapshot is scored on the held-out test rows. Per run it reports the
pass time (first worker step to last worker step), the time to reach the
target holdout logloss (the one-process test logloss + ``--target-gap``), the
final test logloss, and each worker's seconds in clock ticks (mostly SSP
waits). It draws holdout logloss against time, one line per staleness, to
``<--figures>/ssp_<scenario>.png`` (default ``docs/``, the committed figures: give
another folder for a run with fewer staleness values than the default).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

from ftrl_ps.core.ftrl import FTRL, FTRLParams  # noqa: E402
from ftrl_ps.data.libsvm import read_all  # noqa: E402
from ftrl_ps.ps import wire  # noqa: E402

BITS = 20
DOCS = Path(__file__).resolve().parents[1] / "docs"
SPLIT = ["shares"]  # --split of the runs (see --split)
TOKEN = "bench-ssp-token"  # the servers' token, so that the state can be read
SCENARIOS = {
    "transient": ["--straggle-prob", "0.25", "--straggle-delay", "0.3"],
    "persistent": ["--straggle-workers", "0", "--straggle-prob", "1", "--straggle-delay", "0.3"],
}


class Snapshots:
    """Reads ``/v1/state`` of a running server every ``every`` seconds in a thread."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url, every
        self.taken: list[tuple[float, np.ndarray, np.ndarray, np.ndarray]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        headers = {"Accept": wire.BINARY_MEDIA_TYPE, "Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=self.url, trust_env=False, timeout=10) as c:
            while not self._stop.wait(self.every):
                try:
                    resp = c.get("/v1/state", headers=headers)
                except httpx.HTTPError:  # the server has stopped
                    return
                if resp.status_code != 200:  # e.g. 503, another export runs: next time
                    continue
                # the state comes as a stream of ENTRIES messages (a bad one: a bug, raised)
                msgs = [m for m in wire.iter_messages([resp.content], wire.ENTRIES)
                        if m.keys.size]
                if not msgs:
                    continue
                self.taken.append((time.time(), *(np.concatenate(a) for a in zip(
                    *[(m.keys, m.values[0], m.values[1]) for m in msgs], strict=True))))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run(train: Path, test: Path, staleness: str, extra: list[str], every: float,
        seed: int, work: Path) -> dict[str, Any]:
    """One cluster run with snapshots; returns its metrics and snapshots."""
    out = work / "m.json"
    cmd = [sys.executable, "-m", "ftrl_ps", "train", str(train), "--test", str(test),
           "--bits", str(BITS), "--workers", "4", "--staleness", staleness, "--split", SPLIT[0],
           "--seed", str(seed), "--token", TOKEN, "--metrics-json", str(out), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    snaps = None
    tail: list[str] = []
    for line in proc.stderr:  # "servers: URL  (logs in ...)" comes first
        tail.append(line)
        if line.startswith("servers: "):
            snaps = Snapshots(line.split()[1].rstrip(","), every)
            break
    tail.extend(proc.stderr)  # drain the progress display until the end
    code = proc.wait()
    if snaps is not None:
        snaps.stop()
    if code != 0 or snaps is None:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{''.join(tail[-20:])}")
    metrics = json.loads(out.read_text())
    return {"metrics": metrics, "snapshots": snaps.taken}


def score(snapshots: list[Any], test: Any, start: float) -> list[tuple[float, float]]:
    """(seconds since ``start``, holdout logloss) of every snapshot."""
    from ftrl_ps.core.metrics import logloss

    curve = []
    for t, keys, n, z in snapshots:
        model = FTRL(BITS, FTRLParams())
        model.load_state(keys, n, z)
        probs = model.predict_rows(test.indptr, test.indices, test.values)
        curve.append((t - start, logloss(test.labels, probs)))
    return curve


def summarise(name: str, s: str, res: dict[str, Any], test: Any, target: float
              ) -> dict[str, Any]:
    reports = res["metrics"]["worker_reports"]
    start = min(r["started_at"] for r in reports)
    end = max(r["finished_at"] for r in reports)
    curve = score(res["snapshots"], test, start)
    hit = next((t for t, ll in curve if ll <= target), None)
    return {
        "scenario": name, "staleness": s, "pass_seconds": end - start,
        "time_to_target": hit, "final_logloss": res["metrics"]["test_logloss"],
        "wait_seconds": [round(r["wait_seconds"], 2) for r in
                         sorted(reports, key=lambda r: r["worker_index"])],
        "straggles": [r["straggles"] for r in sorted(reports, key=lambda r: r["worker_index"])],
        "curve": curve,
    }


def plot(name: str, runs: list[dict[str, Any]], target: float, path: Path) -> bool:
    """Draw ``runs``' curves to ``path``; False (and why, on stderr) without matplotlib."""
    try:
        import matplotlib
    except ImportError:  # the table is already printed: say how to get the figure too
        print(f"no plot for {name}: matplotlib is missing (pip install -e '.[bench]')",
              file=sys.stderr)
        return False

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in runs:
        if r["curve"]:
            t, ll = zip(*r["curve"], strict=True)
            ax.plot(t, ll, marker=".", label=f"staleness {r['staleness']} "
                    f"(pass {r['pass_seconds']:.1f} s)")
    ax.axhline(target, color="grey", linestyle=":", label=f"target {target:.4f}")
    ax.set_xlabel("seconds since the first worker step")
    ax.set_ylabel("holdout logloss")
    lo = min(min(ll for _, ll in r["curve"]) for r in runs if r["curve"])
    ax.set_ylim(lo - 0.005, lo + 0.08)
    ax.set_title(f"4 workers, {name} stragglers: logloss against time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=h.int_at_least(4), default=200_000,
                   help="training rows generated, test rows a quarter of that "
                   "(default %(default)s)")
    p.add_argument("--staleness", default="0,1,3,8,inf",
                   type=h.comma_list("staleness values", check=h.staleness),
                   help="comma-separated SSP staleness values, inf = asynchronous "
                   "(default %(default)s)")
    p.add_argument("--scenarios", default="transient,persistent",
                   type=h.comma_list("scenarios", choices=tuple(SCENARIOS)),
                   help="comma-separated straggler scenarios, transient or persistent "
                   "(default %(default)s)")
    p.add_argument("--repeat", type=h.positive_int, default=1,
                   help="runs per setting, ftrl-ps train --seed 0, 1, ...; the table shows "
                   "medians, the figures the first run (default %(default)s)")
    p.add_argument("--every", type=h.positive_float, default=0.25,
                   help="seconds between snapshots (default %(default)s)")
    p.add_argument("--target-gap", type=float, default=0.003,
                   help="target holdout logloss: one process's test logloss plus this "
                   "(default %(default)s)")
    p.add_argument("--split", default="shares", choices=("shares", "units"),
                   help="how the workers split the input (default shares: each worker its "
                   "quarter, so only the SSP bound differs between runs)")
    p.add_argument("--json", type=Path,
                   help="also write every run's figures and logloss curve to this file")
    p.add_argument("--figures", type=Path, default=DOCS, metavar="DIR",
                   help="folder of the ssp_<scenario>.png figures (default docs/, which holds "
                   "the committed ones)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    args.figures.mkdir(parents=True, exist_ok=True)
    SPLIT[0] = args.split
    folder, _, _ = h.ensure_synth_data(h.DEFAULT_DATA_DIR, args.rows, args.rows // 4, BITS)
    train, test_file = folder / "train.svm", folder / "test.svm"
    test = read_all(test_file, BITS)
    single = FTRL(BITS, FTRLParams())
    full = read_all(train, BITS)
    single.fit_rows(full.labels, full.indptr, full.indices, full.values)
    from ftrl_ps.core.metrics import logloss

    base = logloss(test.labels, single.predict_rows(test.indptr, test.indices, test.values))
    target = base + args.target_gap
    print(f"one process: test logloss {base:.5f}; target {target:.5f}", file=sys.stderr)
    table, everything = [], {"one_process": base, "target": target, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios:
            firsts = []
            for s in args.staleness:
                runs = [summarise(name, s, run(train, test_file, s, SCENARIOS[name], args.every,
                                               seed, Path(tmp)), test, target)
                        for seed in range(args.repeat)]
                firsts.append(runs[0])
                everything["runs"].extend(runs)
                def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
                    return statistics.median(r[key] if r[key] is not None else float("inf")
                                             for r in runs)

                row = [name, s, f"{med('pass_seconds'):.2f}", f"{med('time_to_target'):.2f}",
                       f"{med('final_logloss'):.5f}",
                       " ".join(f"{w:.1f}" for w in runs[0]["wait_seconds"]),
                       " ".join(str(x) for x in runs[0]["straggles"])]
                table.append(row)
                print("  " + "  ".join(row), file=sys.stderr)
            figure = args.figures / f"ssp_{name}.png"
            if plot(name, firsts, target, figure):
                print(f"figure: {figure}", file=sys.stderr)
    header = ["stragglers", "s", "pass s", "to target s", "final logloss",
              "wait s per worker", "sleeps per worker"]
    print(f"\n4 workers, 1 server, --split {args.split}, {args.rows:,} generated rows, "
          f"2^{BITS} slots; one process "
          f"{base:.5f}, target {target:.5f}; median of {args.repeat} run(s)")
    print(h.format_table(header, table))
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
