"""Write a synthetic data set from typed options and print its summary.

``ftrl-ps gen`` and ``python -m services.gen`` build a :class:`GenOptions`
and call :func:`run_gen`; the generator itself is :mod:`ftrl_ps.data.synth`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["GenOptions", "run_gen"]


@dataclass(frozen=True)
class GenOptions:
    """Everything ``ftrl-ps gen`` is told; field names are the flags' names."""

    outdir: str
    rows: int = 1_000_000
    test_rows: int = 100_000
    seed: int = 0
    bits: int = 22
    fields: int = 39
    positive_rate: float = 0.2
    quiet: bool = False


def run_gen(options: GenOptions) -> dict[str, Any]:
    """Generate ``OUTDIR/{train,test}.svm`` and ``truth.json``; the truth record."""
    from ftrl_ps.data.synth import SynthConfig, generate

    config = SynthConfig(rows=options.rows, test_rows=options.test_rows, seed=options.seed,
                         bits=options.bits, fields=options.fields,
                         positive_rate=options.positive_rate)
    config.validate()  # ConfigError before any file is written
    outdir = options.outdir
    truth = generate(outdir, config, progress=None if options.quiet else sys.stderr)
    stats = truth["stats"]
    total = config.rows + config.test_rows
    seconds = truth["seconds"]
    print(f"wrote {outdir}/train.svm ({config.rows:,} rows), "
          f"{outdir}/test.svm ({config.test_rows:,} rows), {outdir}/truth.json "
          f"in {seconds:.1f} s ({total / seconds:,.0f} rows/s)")
    print(f"positive rate: train {stats['train_positive_rate']:.4f}, "
          f"test {stats['test_positive_rate']:.4f} (target {config.positive_rate})")
    print(f"best achievable test logloss (true model) {stats['bayes_test_logloss']:.4f}, "
          f"constant predictor {stats['constant_test_logloss']:.4f}, "
          f"true-model test AUC {stats['bayes_test_auc']:.4f}")
    return truth
