"""``ftrl-ps tune``: find FTRL settings for a training file, then train the model with them.

:func:`run_tune` takes :class:`TuneOptions`. It parses TRAIN once into memory
(about 8 bytes per feature; ``--max-rows N``: its first N rows), searches alpha,
beta, l1, l2 and the number of passes with the validation scheme, candidates and
successive halving of :mod:`ftrl_ps.learn.search` (held-back rows of TRAIN, never
test data), all candidates trained in the same passes by the K-model kernel,
prints the table of settings and held-back losses, then trains a fresh model
with the winning setting on **all** rows of TRAIN, in file order, for the
winning number of passes (exactly what ``ftrl-ps train TRAIN --params-from OUT``
does: on the rows in memory, or streamed from TRAIN when ``--max-rows`` left
rows out) and saves it. The model header records the choice under ``training.tuned``
(:func:`tuned_settings` reads it back).

This module loads no kernels until :func:`run_tune` runs (the command line and
``train --params-from`` import it before forking servers); the K-model kernels
are compiled ahead of time like the others, so tune starts without numba too.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from ftrl_ps.core.jsonfile import summary_stream, write_json
from ftrl_ps.core.modelio import load_model
from ftrl_ps.core.params import DEFAULT_BITS, FTRLParams
from ftrl_ps.errors import ConfigError, DataError, ModelFormatError

__all__ = ["TuneOptions", "TunedSettings", "run_tune", "tuned_settings"]


@dataclass(frozen=True)
class TuneOptions:
    """What ``ftrl-ps tune`` is told; field names are the flags' names."""

    train: str
    model: str
    budget: float = 8.0
    max_epochs: int = 16
    holdout: float = 0.2
    validation: str = "every"
    bits: int | None = None
    dtype: str | None = None
    skip_bad_lines: bool = False
    chunk_mb: int = 4
    metrics_json: str | None = None
    quiet: bool = False
    threads: int = 1
    max_rows: int | None = None


@dataclass(frozen=True)
class TunedSettings:
    """The settings a model file carries: hyper-parameters, passes, feature space."""

    params: FTRLParams
    epochs: int
    bits: int
    dtype: str
    tuned: bool


def tuned_settings(path: str | os.PathLike[str]) -> TunedSettings:
    """Settings of the model file ``path``: those ``ftrl-ps tune`` chose, or for any
    other model its hyper-parameters and the passes it was trained with."""
    saved = load_model(path)
    tuned = saved.training.get("tuned")
    epochs = (tuned or {}).get("epochs", saved.training.get("epochs", 1))
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ModelFormatError(f"model file {path}: bad number of passes {epochs!r}")
    return TunedSettings(saved.params, epochs, saved.bits, saved.dtype, tuned is not None)


def _size(path: str) -> int | None:
    """Bytes of the input ``path`` (all its parts; None if it cannot be told)."""
    from ftrl_ps.data.sources import expand

    try:
        return sum(p.size for p in expand(path))
    except (ConfigError, OSError):
        return None


def _read(opts: TuneOptions, bits: int, progress: Any = None
          ) -> tuple[Any, bool, int, list[Any]]:
    """TRAIN's rows (its first ``opts.max_rows``), whether rows were left out,
    and the bad lines skipped (count and examples); ``progress`` (default: a
    line on stderr unless ``opts.quiet``) shows the rows read and the share
    done of TRAIN's bytes on disk (or of ``opts.max_rows``)."""
    from ftrl_ps.data.batch import Batch
    from ftrl_ps.data.inputs import InputReader
    from ftrl_ps.learn.progress import Progress
    from ftrl_ps.learn.training import PARSE_THREADS

    if progress is None:
        progress = Progress("reading TRAIN", enabled=not opts.quiet)
    reader = InputReader(opts.train, bits, chunk_bytes=opts.chunk_mb << 20,  # (globs too)
                         skip_bad_lines=opts.skip_bad_lines, threads=PARSE_THREADS)
    cut = _FirstRows(reader, opts.max_rows)

    def shown() -> Iterator[Any]:
        rows = 0
        for batch in cut:
            rows += batch.rows
            done = (rows / opts.max_rows if opts.max_rows
                    else reader.fraction())
            progress.update(rows, fraction=done)
            yield batch
        progress.update(rows, fraction=1.0, force=True)
        progress.close()

    rows = Batch.collect(shown())  # chunk by chunk: the rows in fresh memory once
    return rows, cut.left_out, reader.stats.bad_lines, reader.stats.bad_examples


class _FirstRows:
    """The batches of ``batches`` up to ``limit`` rows in all (None: every row);
    ``left_out`` tells afterwards whether rows were left out."""

    def __init__(self, batches: Iterable[Any], limit: int | None) -> None:
        self.batches, self.limit, self.left_out = batches, limit, False

    def __iter__(self) -> Iterator[Any]:
        seen = 0
        for batch in self.batches:
            if self.limit is not None and seen + batch.rows > self.limit:
                self.left_out = True
                if self.limit > seen:
                    yield batch.head(self.limit - seen)
                return
            seen += batch.rows
            yield batch


def _warn_if_too_big(opts: TuneOptions, size: int | None) -> None:
    """Warn when TRAIN's text alone (``size`` bytes) is larger than the memory
    available (tune holds its rows in memory; 7.4 GB of generated text took 7.2 GB)."""
    if opts.max_rows is not None or size is None:
        return
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return  # not Linux: nothing to compare
    if size > available:
        print(f"tune: warning: TRAIN is {size / 1e9:.1f} GB of text and {available / 1e9:.1f} "
              "GB of memory is available; tune holds TRAIN's rows in memory (about the "
              "text's size), so it may run out: --max-rows N searches on the first N rows "
              "(the final model still trains on all of TRAIN)", file=sys.stderr)


#: lines of the printed table (the JSON report has every candidate)
SHOWN = 15


def _table(result: Any, best: Any, out: TextIO) -> list[dict[str, Any]]:
    """Print the best :data:`SHOWN` candidates and the defaults, best first;
    return every candidate as a dict."""
    rows = []
    for c in sorted({t.candidate for t in result.trials}):
        mine = [t for t in result.trials if t.candidate == c]
        top = result.best_of(c)
        rows.append({**top.params.as_dict(), "candidate": c, "passes_trained": len(mine),
                     "best_passes": top.epochs, "holdout_logloss": top.holdout_logloss,
                     "pass1_logloss": mine[0].holdout_logloss})
    rows.sort(key=lambda r: (r["holdout_logloss"], r["candidate"]))
    print(f"{'':2}{'alpha':>9} {'beta':>8} {'l1':>9} {'l2':>9} {'passes':>7} {'best':>5} "
          f"{'held-out logloss':>17} {'after 1 pass':>13}", file=out)
    hidden = [i >= SHOWN and r["candidate"] != 0 for i, r in enumerate(rows)]
    for i, r in enumerate(rows):
        if hidden[i]:  # said once, where the first is left out (the defaults always shown)
            if not any(hidden[:i]):
                print(f"{'':2}... {sum(hidden)} more (all in --metrics-json)", file=out)
            continue
        mark = "*" if r["candidate"] == best.candidate else " "
        note = "  (defaults)" if r["candidate"] == 0 else ""
        print(f"{mark:2}{r['alpha']:9.4g} {r['beta']:8.4g} {r['l1']:9.4g} {r['l2']:9.4g} "
              f"{r['passes_trained']:7d} {r['best_passes']:5d} {r['holdout_logloss']:17.5f} "
              f"{r['pass1_logloss']:13.5f}{note}", file=out)
    return rows


def run_tune(opts: TuneOptions) -> int:
    """Run ``ftrl-ps tune``; see the module docstring. Returns the exit code (0)."""
    from ftrl_ps.core.modelio import save_model
    from ftrl_ps.core.multi import compact_keys
    from ftrl_ps.data.batch import Batch
    from ftrl_ps.learn import search
    from ftrl_ps.learn.progress import report_bad_lines

    if opts.train == "-":
        raise ConfigError("tune reads TRAIN several times: give a file, not stdin")
    if opts.budget <= 0 or opts.max_epochs < 1:
        raise ConfigError("--budget must be > 0 and --max-epochs >= 1")
    if opts.max_rows is not None and opts.max_rows < 2:
        raise ConfigError(f"--max-rows must be >= 2 (rows to train and to score), "
                          f"got {opts.max_rows}")
    search.holdout_split(10, opts.holdout, opts.validation)  # checks both before parsing
    bits = opts.bits if opts.bits is not None else DEFAULT_BITS
    dtype = opts.dtype or "float32"
    size = _size(opts.train)
    _warn_if_too_big(opts, size)
    started = time.perf_counter()
    data, left_out, bad_lines, bad_examples = _read(opts, bits)
    if not left_out:  # else the final pass over all of TRAIN reports them
        report_bad_lines(bad_lines, bad_examples)
    if data.rows < 2:
        raise DataError(f"{opts.train}: {data.rows} row(s); tune needs rows to train and score")
    parsed = time.perf_counter()
    # the rows' slots become compact keys in place: the search and the final model
    # train on them, and the model file maps them back (indices held once)
    slots, compact = compact_keys(data.indices, 1 << bits, in_place=True)
    rows = Batch(data.labels, data.indptr, compact, data.values)
    del data
    searched_rows = rows.rows
    train, held = search.holdout_split(rows.rows, opts.holdout, opts.validation)
    row_features = rows.indptr[1:] - rows.indptr[:-1] + 1
    features = int(row_features.sum())
    schedule = search.plan(opts.budget, opts.max_epochs, features,
                           int(row_features[train].sum()), int(row_features[held].sum()))
    settings = search.candidates(schedule.candidates)
    what = (f"one row in {max(2, round(1 / opts.holdout))}" if opts.validation == "every"
            else f"the last {opts.holdout:.0%} of the rows")
    if not opts.quiet:
        first = " first" if left_out else ""
        print(f"tuning on the{first} {rows.rows:,} rows ({train.size:,} train, "
              f"{held.size:,} held back: {what}); {schedule.candidates} settings, passes "
              f"{'/'.join(map(str, schedule.rungs))} (successive halving), budget "
              f"{opts.budget:g} default runs", file=sys.stderr)

    def on_pass(epoch: int, models: int) -> None:
        if not opts.quiet:
            print(f"tune: pass {epoch} of {models} setting(s) "
                  f"({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)

    result = search.successive_halving(rows, slots.size + 1, train, held, settings, schedule,
                                       dtype="float32", threads=opts.threads,
                                       on_pass=on_pass)
    searched = time.perf_counter()
    best = result.best
    out = summary_stream(opts.metrics_json)  # stderr when the JSON has stdout
    table = _table(result, best, out)
    if left_out:  # the rows searched are freed before all of TRAIN is read again
        del rows, compact, train, held, row_features
        model, trained, loss_sum, bad_lines = _final_streamed(opts, best, bits, dtype)
    else:
        model, trained, loss_sum = _final_on_rows(best, rows, slots, bits, dtype)
    cost = search.fixed_cost(features, best.epochs) + result.cost
    budget_cost = opts.budget * search.default_run_cost(features)
    tuned = {**best.params.as_dict(), "epochs": best.epochs,
             "holdout_logloss": best.holdout_logloss,
             "defaults_holdout_logloss": result.best_of(0).holdout_logloss,
             "validation": opts.validation, "holdout": opts.holdout, "budget": opts.budget,
             "candidates": schedule.candidates, "rungs": list(schedule.rungs),
             "trials": len(result.trials), "cost_default_runs": cost / search.default_run_cost(
                 features)}
    path = save_model(opts.model, model, rows=trained * best.epochs, epochs=best.epochs,
                      train=str(opts.train),
                      progressive_logloss=loss_sum / (trained * best.epochs), tuned=tuned)
    done = time.perf_counter()
    p = best.params
    print(f"best: alpha {p.alpha:g} beta {p.beta:g} l1 {p.l1:g} l2 {p.l2:g}, {best.epochs} "
          f"pass(es): held-out logloss {best.holdout_logloss:.5f} (defaults "
          f"{result.best_of(0).holdout_logloss:.5f}); {len(result.trials)} trials in "
          f"{searched - parsed:.2f} s, cost {cost / budget_cost:.0%} of the budget", file=out)
    print(f"model trained on all {trained:,} rows x {best.epochs} pass(es) saved to {path} "
          f"({model.keys.size:,} keys with state); total {done - started:.2f} s", file=out)
    write_json(opts.metrics_json, {
        "rows": trained, "rows_searched": searched_rows, "max_rows": opts.max_rows,
        "features": features, "bad_lines": bad_lines, "best": tuned,
        "table": table, "parse_seconds": parsed - started, "search_seconds": searched - parsed,
        "final_seconds": done - searched, "seconds": done - started, "bits": bits,
        "cost": cost, "budget_cost": budget_cost,
    })
    return 0


def _final_streamed(opts: TuneOptions, best: Any, bits: int, dtype: str
                    ) -> tuple[Any, int, float, int]:
    """The winning setting's model on all of TRAIN, read as ``ftrl-ps train`` reads it
    (``--max-rows`` left rows out of the search): ``(model, rows of a pass,
    progressive log loss summed over every pass, bad lines skipped in a pass)``;
    the bad lines are reported as ``ftrl-ps train`` reports them."""
    from ftrl_ps.core.ftrl import FTRL
    from ftrl_ps.core.modelio import SavedModel
    from ftrl_ps.learn.progress import Progress, report_bad_lines
    from ftrl_ps.learn.training import train

    if not opts.quiet:
        print(f"tune: training the model on all of {opts.train} ({best.epochs} pass(es))",
              file=sys.stderr, flush=True)
    model = FTRL(bits, best.params, dtype=dtype)
    report = train(model, opts.train, epochs=best.epochs, chunk_bytes=opts.chunk_mb << 20,
                   skip_bad_lines=opts.skip_bad_lines,
                   progress=Progress("final model", enabled=not opts.quiet))
    bad_lines = report.bad_lines // best.epochs
    report_bad_lines(bad_lines, report.bad_examples)  # the first ones: the first pass's
    return SavedModel.from_ftrl(model), report.rows // best.epochs, report.loss_sum, bad_lines


def _final_on_rows(best: Any, rows: Any, slots: Any, bits: int, dtype: str
                   ) -> tuple[Any, int, float]:
    """The winning setting's model on the rows in memory, all of TRAIN: its compact
    keys' state takes the same updates as an FTRL of 2**bits slots, bit for bit."""
    import numpy as np

    from ftrl_ps.core.ftrl import fit_compact
    from ftrl_ps.core.modelio import SavedModel

    state = np.zeros((slots.size + 1, 2), dtype=dtype)
    loss_sum = 0.0
    for _ in range(best.epochs):
        loss_sum += fit_compact(state, best.params, rows.labels, rows.indptr, rows.indices,
                                rows.values)
    return SavedModel.from_compact(bits, best.params, state, slots), rows.rows, loss_sum
