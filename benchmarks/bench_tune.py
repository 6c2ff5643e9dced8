"""``ftrl-ps tune`` and the Python estimator against the goals of issue 13.

Usage::

    python benchmarks/bench_tune.py [--rows 1000000] [--repeat 3] [--data-dir DIR] [--json OUT]

For every train/test pair of ``../shared/data`` that is present (a9a, agaricus,
iPinYou, rcv1 small) and for the generator (``--rows`` rows, 2^22 slots, seed 0;
cached in ``--data-dir``), with 2^22 slots everywhere:

1. **defaults**: ``ftrl-ps train TRAIN --bits 22 --model M`` (one pass, alpha 0.1,
   beta 1, l1 1, l2 1); wall time of the whole process;
2. **tune**: ``ftrl-ps tune TRAIN --bits 22 --model T`` (default budget); wall time;
3. **liblinear**: scikit-learn's ``LogisticRegression(solver="liblinear")`` for C in
   a grid; the test log loss of the best C *chosen on the test set* (the
   strictest reference), and of the C that 3-fold cross-validation on TRAIN
   (shuffled, stratified) picks (the honest one; real data sets only);

test log loss of each on TEST (same metric code), the goals (tune <= min(liblinear
best C, defaults) + 0.005; tune <= defaults + 0.001; tune wall <= 10x the
defaults' wall), then ``FTRLClassifier.fit`` on a9a as CSR against ``ftrl-ps
train`` on the text (rows/s; goal >= 50 %) and the largest difference of their
predictions. Wall times are the fastest of ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402

from ftrl_ps.core.modelio import load_model  # noqa: E402
from ftrl_ps.data.libsvm import read_all  # noqa: E402

DATA, PAIRS = h.SHARED_DATA, h.REAL_PAIRS
BITS = 22
C_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
#: the generator's grid, around its best C (one fit takes minutes on 1M rows here)
C_GRID_SYNTH = (0.03, 0.1, 0.3)


def _ftrl(args: list[str], work: Path, tag: str) -> tuple[h.Measured, dict[str, Any]]:
    report = work / f"{tag}.json"
    cmd = [sys.executable, "-m", "ftrl_ps", *args, "--bits", str(BITS), "-q",
           "--metrics-json", str(report)]
    m = h.run_measured(cmd, work / tag)
    if m.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{m.tail()}")
    return m, json.loads(report.read_text())


def _test_logloss(model: Path, test: Path) -> float:
    ftrl = load_model(model).to_ftrl()
    rows = read_all(test, BITS)
    return h.logloss(rows.labels, ftrl.predict_rows(rows.indptr, rows.indices, rows.values))


def _svmlight(train: Path, test: Path) -> tuple[Any, np.ndarray, Any, np.ndarray]:
    """TRAIN and TEST as CSR with only the columns that occur (liblinear's solver
    works on dense vectors of all columns: 2^22 of them made it ~10x slower)."""
    from sklearn.datasets import load_svmlight_file

    def load(path: Path) -> tuple[Any, np.ndarray]:
        text = path.read_bytes().replace(b" |f ", b" ")  # rcv1 small is in VW's format
        X, y = load_svmlight_file(io.BytesIO(text), zero_based=True)
        return X, (y > 0).astype(int)

    (X, y), (Xt, yt) = load(train), load(test)
    used = np.union1d(X.indices, Xt.indices)
    for m in (X, Xt):
        m.indices = np.searchsorted(used, m.indices).astype(np.int32)  # 32-bit for liblinear
        m.indptr = m.indptr.astype(np.int32)
        m._shape = (m.shape[0], used.size)
    return X, y, Xt, yt


def _liblinear(train: Path, test: Path, grid: tuple[float, ...], cv: bool) -> dict[str, Any]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    X, y, Xt, yt = _svmlight(train, test)
    out: dict[str, Any] = {"by_c": {}}
    for c in grid:
        model = LogisticRegression(solver="liblinear", C=c).fit(X, y)
        out["by_c"][c] = h.logloss(yt, model.predict_proba(Xt)[:, 1])
    out["best_c"] = min(out["by_c"], key=out["by_c"].get)
    out["best"] = out["by_c"][out["best_c"]]
    if cv:
        folds = StratifiedKFold(3, shuffle=True, random_state=0)  # files may be sorted
        search = GridSearchCV(LogisticRegression(solver="liblinear"), {"C": list(grid)},
                              cv=folds, scoring="neg_log_loss").fit(X, y)
        out["cv_c"] = search.best_params_["C"]
        out["cv"] = out["by_c"][out["cv_c"]]
    return out


def _estimator_speed(train: Path, test: Path, work: Path, repeat: int) -> dict[str, Any]:
    from sklearn.datasets import load_svmlight_file

    from ftrl_ps import FTRLClassifier

    X, y = load_svmlight_file(str(train), zero_based=True)
    Xt, _ = load_svmlight_file(str(test), zero_based=True, n_features=X.shape[1])
    FTRLClassifier().fit(X[:100], y[:100])  # kernels loaded
    fits = []
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        clf = FTRLClassifier().fit(X, y)
        fits.append(time.perf_counter() - start)
    cli = []
    for i in range(max(repeat, 3)):
        _, report = _ftrl(["train", str(train), "--model", str(work / "a9a_cli.ftrl")], work,
                          f"a9a_cli_{i}")
        cli.append(report["rows_per_second"])
    preds = clf.predict_proba(Xt)[:, 1]
    cli_model = load_model(work / "a9a_cli.ftrl").to_ftrl()
    rows = read_all(test, BITS)
    cli_preds = cli_model.predict_rows(rows.indptr, rows.indices, rows.values)
    return {"fit_rows_per_second": X.shape[0] / min(fits), "fit_seconds": fits,
            "cli_rows_per_second": max(cli), "cli_all": cli,
            "max_prediction_difference": float(np.abs(preds - cli_preds).max())}


def _one(name: str, train: Path, test: Path, work: Path, repeat: int,
         grid: tuple[float, ...], cv: bool) -> dict[str, Any]:
    walls: dict[str, list[float]] = {"defaults": [], "tune": []}
    reports: dict[str, Any] = {}
    rss = 0.0
    for i in range(repeat):  # interleaved, so both see the same machine load
        m, _ = _ftrl(["train", str(train), "--model", str(work / f"{name}_d.ftrl")], work,
                     f"{name}_d{i}")
        walls["defaults"].append(m.wall_seconds)
        m, reports["tune"] = _ftrl(["tune", str(train), "--model", str(work / f"{name}_t.ftrl")],
                                   work, f"{name}_t{i}")
        walls["tune"].append(m.wall_seconds)
        rss = max(rss, m.max_rss_mib)
    result = {
        "defaults": {"wall": min(walls["defaults"]), "walls": walls["defaults"],
                     "test_logloss": _test_logloss(work / f"{name}_d.ftrl", test)},
        "tune": {"wall": min(walls["tune"]), "walls": walls["tune"],
                 "test_logloss": _test_logloss(work / f"{name}_t.ftrl", test),
                 "best": reports["tune"]["best"], "seconds": reports["tune"]["seconds"],
                 "peak_rss_mib": rss,
                 "search_seconds": reports["tune"]["search_seconds"]},
    }
    print(f"  {name}: defaults {result['defaults']['test_logloss']:.5f}, tune "
          f"{result['tune']['test_logloss']:.5f}; liblinear ...", file=sys.stderr, flush=True)
    result["liblinear"] = _liblinear(train, test, grid, cv)
    return result


def _report(results: dict[str, Any]) -> None:
    rows = []
    for name, r in results.items():
        if name.startswith("_"):
            continue
        d, t, ll = r["defaults"], r["tune"], r["liblinear"]
        ref = min(ll["best"], d["test_logloss"])
        b = t["best"]
        rows.append([
            name, f"{d['test_logloss']:.4f}", f"{ll['best']:.4f} (C={ll['best_c']:g})",
            f"{ll['cv']:.4f} (C={ll['cv_c']:g})" if "cv" in ll else "-",
            f"{t['test_logloss']:.4f}", f"{t['test_logloss'] - ref:+.4f}",
            f"{t['test_logloss'] - d['test_logloss']:+.4f}",
            f"{d['wall']:.2f}", f"{t['wall']:.2f}", f"{t['wall'] / d['wall']:.1f}x",
            f"{t['peak_rss_mib']:.0f}",
            f"a={b['alpha']:g} b={b['beta']:g} l1={b['l1']:g} l2={b['l2']:g} x{b['epochs']}",
        ])
    print(h.format_table(
        ["data", "defaults", "liblinear best C", "liblinear CV C", "tune", "vs best",
         "vs dflt", "dflt s", "tune s", "ratio", "tune MiB", "tuned setting"], rows))
    ok = all(
        r["tune"]["test_logloss"] <= min(r["liblinear"]["best"], r["defaults"]["test_logloss"])
        + 0.005 and r["tune"]["test_logloss"] <= r["defaults"]["test_logloss"] + 0.001
        and r["tune"]["wall"] <= 10 * r["defaults"]["wall"]
        for n, r in results.items() if not n.startswith("_"))
    print(f"goals (<= best + 0.005, <= defaults + 0.001, <= 10x wall) all met: {ok}")
    est = results.get("_estimator")
    if est:
        print(f"FTRLClassifier.fit on a9a (CSR): {est['fit_rows_per_second']:,.0f} rows/s; "
              f"ftrl-ps train on the text: {est['cli_rows_per_second']:,.0f} rows/s "
              f"({est['fit_rows_per_second'] / est['cli_rows_per_second']:.0%}); largest "
              f"prediction difference {est['max_prediction_difference']:.1e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="generator rows (0: skip)")
    p.add_argument("--test-rows", type=int, default=100_000,
                   help="test rows of the generated set (default %(default)s)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each (fastest kept)")
    p.add_argument("--data-dir", type=Path, default=h.DEFAULT_DATA_DIR,
                   help="cache of the generated data (default benchmarks/.data)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    results: dict[str, Any] = {"_load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pairs = {n: (DATA / a, DATA / b) for n, (a, b) in PAIRS.items()
                 if (DATA / a).exists() and (DATA / b).exists()}
        for missing in sorted(set(PAIRS) - set(pairs)):
            print(f"skip {missing}: not in {DATA}", file=sys.stderr)
        if args.rows:
            folder, _, _ = h.ensure_synth_data(args.data_dir, args.rows, args.test_rows, BITS)
            pairs["generator"] = (folder / "train.svm", folder / "test.svm")
        warm = next(iter(pairs.values()))[0]  # numba's cache filled before timing
        _ftrl(["tune", str(warm), "--model", str(work / "warm.ftrl"), "--budget", "3"],
              work, "warm")
        for name, (train, test) in pairs.items():
            print(f"{name} ...", file=sys.stderr, flush=True)
            synth = name == "generator"
            results[name] = _one(name, train, test, work, args.repeat,
                                 C_GRID_SYNTH if synth else C_GRID, cv=not synth)
        if "a9a" in pairs:
            results["_estimator"] = _estimator_speed(*pairs["a9a"], work, args.repeat)
    results["_load_end"] = os.getloadavg()
    print(f"\nload average at start {results['_load_start'][0]:.1f}, "
          f"at end {results['_load_end'][0]:.1f} (2 vCPUs)")
    _report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
