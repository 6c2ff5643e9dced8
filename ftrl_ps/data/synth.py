"""Seeded synthetic CTR data (Criteo-like) with a known true logistic model.

Design
------
A row has ``fields`` fields (default 39): the first ``p = fields // 3`` are
numeric "count" fields (13 by default), the other ``q = fields - p`` are
categorical (26 by default).

* Numeric field ``j`` always sits at slot ``j``. Its count is
  ``c = floor(exp(mu_j + sd_j * N(0, 1)))`` and the written value is
  ``log1p(c)`` rounded to 3 decimals; zero values are not written, so a row
  has at most ``fields`` features (about 36 on average).
* Categorical field ``f`` has a cardinality between 10 and 10**6 (log-evenly
  spread over the fields, shuffled by the seed) and a power-law (Zipf-like)
  distribution: rank ``r = floor(x) - 1`` with ``x`` drawn from the density
  ``x**-s_f`` on ``[1, card_f + 1)``, ``s_f`` in ``[1.05, 1.6]``.
  Category ``r`` of field ``f`` is one-hot at the slot
  ``p + mix64(key_f + r) mod (2**bits - p)`` where
  ``key_f = mix64(mix64(seed) ^ (f + 1) * 0x9E3779B97F4A7C15)`` and ``mix64``
  is the splitmix64 finaliser (all arithmetic modulo 2**64). Two fields that
  land on the same slot in a row are merged into one feature whose value is
  their count (the libsvm reader's rule is to sum duplicates, so the file
  means the same thing either way). Indices are written in ascending order.

The true model is a sparse logistic regression over exactly these libsvm
features: ``P(y = 1 | x) = sigmoid(bias + sum_j w[j] * x[j])``. The numeric
weights are listed in ``truth.json``; the weight of a categorical slot is a
function of the seed and the slot (:func:`true_weights`): zero with
probability :data:`CAT_ZERO_FRACTION`, otherwise Laplace with scale
:data:`CAT_LAPLACE_SCALE`. ``bias`` is calibrated on a seeded sample so that
the expected positive rate is ``positive_rate`` (default 0.2, typical of CTR
data sets such as Criteo's 25 %). Labels are drawn ``Bernoulli(P)`` and
written as ``1`` / ``0``.

Determinism: the rows of block ``k`` (:data:`BLOCK_ROWS` rows) of a split come
from ``numpy.random.default_rng([seed, split, k])``, so the same seed gives
byte-identical files and a file with ``n`` rows is the first ``n`` lines of
any longer file with the same seed, bits and fields.

Examples
--------
>>> import tempfile, pathlib
>>> from ftrl_ps.data.synth import SynthConfig, generate
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> truth = generate(out, SynthConfig(rows=1000, test_rows=500, bits=18))
>>> truth["stats"]["bayes_test_logloss"] < truth["stats"]["constant_test_logloss"]
True
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ftrl_ps._kernels.aot import kernels
from ftrl_ps.core.metrics import auc, logloss
from ftrl_ps.errors import ConfigError, DataError

__all__ = [
    "BLOCK_ROWS",
    "CAT_LAPLACE_SCALE",
    "CAT_ZERO_FRACTION",
    "Design",
    "SynthConfig",
    "format_rows",
    "generate",
    "make_design",
    "true_weights",
]

#: rows per generated block (fixed: the files depend on it)
BLOCK_ROWS = 32768
#: fraction of categorical slots whose true weight is exactly zero
CAT_ZERO_FRACTION = 0.5
#: scale of the Laplace distribution of the non-zero categorical weights
CAT_LAPLACE_SCALE = 0.3
_NUMERIC_WEIGHT_SD = 0.15
_CALIBRATION_BLOCKS = 2
_TRAIN, _TEST, _CALIBRATION = 0, 1, 2
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class SynthConfig:
    """What to generate; :meth:`validate` raises :class:`ConfigError` on bad values."""

    rows: int
    test_rows: int
    seed: int = 0
    bits: int = 22
    fields: int = 39
    positive_rate: float = 0.2

    @property
    def n_numeric(self) -> int:
        return self.fields // 3

    @property
    def n_categorical(self) -> int:
        return self.fields - self.n_numeric

    def validate(self) -> None:
        if self.rows < 1:
            raise ConfigError(f"rows must be >= 1, got {self.rows}")
        if self.test_rows < 1:
            raise ConfigError(f"test rows must be >= 1, got {self.test_rows}")
        if not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed must be in [0, 2**63), got {self.seed}")
        if not 8 <= self.bits <= 30:
            raise ConfigError(f"bits must be in [8, 30], got {self.bits}")
        if not 2 <= self.fields <= 1000:
            raise ConfigError(f"fields must be in [2, 1000], got {self.fields}")
        if 2 * self.n_numeric > 1 << self.bits:  # numeric slots first, categories after
            raise ConfigError(
                f"{self.fields} fields need more than 2**{self.bits} slots: each of the "
                f"{self.n_numeric} numeric ones (a third) has a slot of its own, and the "
                "categories hash into the rest; raise bits or lower fields"
            )
        if not 0.01 <= self.positive_rate <= 0.99:
            raise ConfigError(f"positive rate must be in [0.01, 0.99], got {self.positive_rate}")


@dataclass(frozen=True)
class Design:
    """The data distribution and true model derived from a :class:`SynthConfig`."""

    config: SynthConfig
    cardinalities: np.ndarray  # (q,) int64
    exponents: np.ndarray  # (q,) float64, Zipf exponents
    field_keys: np.ndarray  # (q,) uint64
    weight_key: np.uint64
    numeric_mu: np.ndarray  # (p,) float64
    numeric_sd: np.ndarray  # (p,) float64
    numeric_weights: np.ndarray  # (p,) float64
    bias: float


def _mix64(x: np.ndarray | np.uint64) -> np.ndarray:
    """splitmix64 finaliser on uint64 values of any shape (wraps modulo 2**64).

    Runs :func:`ftrl_ps._kernels.mix.mix64_array`; the result has the shape of ``x``.
    """
    z = np.asarray(x, dtype=np.uint64)
    return kernels("mix").mix64_array(z.ravel()).reshape(z.shape)


def _sigmoid(score: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * score))


def true_weights(design: Design, slots: np.ndarray) -> np.ndarray:
    """True weight of each slot (any shape of non-negative ints below ``2**bits``)."""
    slots = np.asarray(slots, dtype=np.int64)
    p = design.config.n_numeric
    h1 = _mix64(design.weight_key ^ slots.astype(np.uint64))
    with np.errstate(over="ignore"):
        h2 = _mix64(h1 + _GOLDEN)
    u = (h1 >> np.uint64(11)).astype(np.float64) * 2.0**-53
    v = ((h2 >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    sign = np.where((h1 & np.uint64(1)) == 1, 1.0, -1.0)
    w = np.where(u < CAT_ZERO_FRACTION, 0.0, sign * CAT_LAPLACE_SCALE * -np.log(v))
    numeric = slots < p
    if numeric.any():
        w[numeric] = design.numeric_weights[slots[numeric]]
    return w


def make_design(config: SynthConfig) -> Design:
    """Derive the distribution and the true model (with calibrated bias) from ``config``."""
    config.validate()
    p, q = config.n_numeric, config.n_categorical
    rng = np.random.default_rng([config.seed, 0xD35160])
    spread = np.linspace(1.0, 6.0, q) if q > 1 else np.array([3.0])
    cardinalities = np.rint(10.0 ** rng.permutation(spread)).astype(np.int64)
    exponents = rng.uniform(1.05, 1.6, q)
    numeric_mu = rng.uniform(0.0, 3.0, p)
    numeric_sd = rng.uniform(0.5, 1.5, p)
    numeric_weights = np.where(
        rng.random(p) < 0.3, 0.0, rng.normal(0.0, _NUMERIC_WEIGHT_SD, p)
    )
    base = _mix64(np.uint64(config.seed))
    with np.errstate(over="ignore"):
        field_keys = _mix64(base ^ (np.arange(1, q + 1, dtype=np.uint64) * _GOLDEN))
    weight_key = np.uint64(_mix64(base ^ np.uint64(0x5EED)))
    design = Design(config, cardinalities, exponents, field_keys, weight_key,
                    numeric_mu, numeric_sd, numeric_weights, bias=0.0)
    scores = np.concatenate(
        [_sample_block(design, _CALIBRATION, k)[3] for k in range(_CALIBRATION_BLOCKS)]
    )
    lo, hi = -30.0, 30.0
    for _ in range(100):  # bisection: mean sigmoid(b + s) is increasing in b
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _sigmoid(mid + scores).mean() < config.positive_rate else (lo, mid)
    return replace(design, bias=0.5 * (lo + hi))


def _sample_block(
    design: Design, split: int, block: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One block: labels (uint8), numeric milli-values, sorted slots, true scores."""
    cfg = design.config
    p, q, n = cfg.n_numeric, cfg.n_categorical, BLOCK_ROWS
    rng = np.random.default_rng([cfg.seed, split, block])
    one_minus_s = 1.0 - design.exponents
    top = (design.cardinalities + 1.0) ** one_minus_s - 1.0
    x = (top * rng.random((n, q)) + 1.0) ** (1.0 / one_minus_s)
    ranks = np.minimum(np.floor(x).astype(np.int64) - 1, design.cardinalities - 1)
    with np.errstate(over="ignore"):
        hashed = _mix64(design.field_keys + ranks.astype(np.uint64))
    slots = (hashed % np.uint64(2**cfg.bits - p)).astype(np.int64) + p
    counts = np.floor(np.exp(design.numeric_mu + design.numeric_sd * rng.standard_normal((n, p))))
    milli = np.rint(np.log1p(counts) * 1000.0).astype(np.int64)
    score = design.bias + (milli / 1000.0) @ design.numeric_weights
    score += true_weights(design, slots).sum(axis=1)
    labels = (rng.random(n) < _sigmoid(score)).astype(np.uint8)
    slots.sort(axis=1)
    return labels, milli, slots, score


def format_rows(labels: np.ndarray, numeric_milli: np.ndarray, cat_slots: np.ndarray) -> bytes:
    """libsvm text of rows given as arrays (see the module docstring for the layout).

    Parameters
    ----------
    labels : uint8 array (n,) of 0/1.
    numeric_milli : int64 array (n, p) >= 0: value of numeric slot ``j`` times 1000.
    cat_slots : int64 array (n, q), rows sorted ascending, every slot >= p.

    Examples
    --------
    >>> import numpy as np
    >>> format_rows(np.array([1, 0], np.uint8), np.array([[1500], [0]]),
    ...             np.array([[3, 3, 9], [1, 2, 2]]))
    b'1 0:1.5 3:2 9:1\\n0 1:1 2:2\\n'
    """
    labels = np.ascontiguousarray(labels)
    numeric_milli = np.ascontiguousarray(numeric_milli)
    cat_slots = np.ascontiguousarray(cat_slots)
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataError(f"labels must be a 1-D uint8 array, got {labels.dtype} {labels.shape}")
    n = labels.shape[0]
    for name, arr in (("numeric_milli", numeric_milli), ("cat_slots", cat_slots)):
        if arr.dtype != np.int64 or arr.ndim != 2 or arr.shape[0] != n:
            raise DataError(f"{name} must be int64 of shape ({n}, k), got {arr.dtype} {arr.shape}")
    if n == 0:
        return b""
    p, q = numeric_milli.shape[1], cat_slots.shape[1]
    if labels.max() > 1:
        raise DataError("labels must be 0 or 1")
    if p and numeric_milli.min() < 0:
        raise DataError("numeric values must be >= 0")
    if q and (cat_slots.min() < p or (np.diff(cat_slots, axis=1) < 0).any()):
        raise DataError(f"categorical slots must be >= {p} and sorted within each row")
    max_int = int(numeric_milli.max()) // 1000 if p else 0
    max_slot = int(cat_slots.max()) if q else 0
    size = n * (2 + p * (2 + len(str(p)) + len(str(max_int)) + 4)
                + q * (2 + len(str(max_slot)) + len(str(q))))
    out = np.empty(size, dtype=np.uint8)
    nbytes = kernels("synth").format_block_kernel(labels, numeric_milli, cat_slots, out)
    return out[:nbytes].tobytes()


def _write_split(
    design: Design, path: Path, split: int, rows: int, progress: TextIO | None, keep: bool
) -> dict[str, Any]:
    """Write one split to ``path`` + ".part" (:func:`generate` renames it); return
    positives, feature count and (if ``keep``) labels/scores."""
    part = path.with_name(path.name + ".part")
    positives = features = 0
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    start = last = time.perf_counter()
    with open(part, "wb") as fh:
        for block in range(math.ceil(rows / BLOCK_ROWS)):
            labels, milli, slots, score = _sample_block(design, split, block)
            take = min(BLOCK_ROWS, rows - block * BLOCK_ROWS)
            labels, milli, slots, score = labels[:take], milli[:take], slots[:take], score[:take]
            fh.write(format_rows(labels, milli, slots))
            positives += int(labels.sum())
            features += int((milli > 0).sum()) + slots.size - int((np.diff(slots) == 0).sum())
            if keep:
                kept.append((labels, score))
            now = time.perf_counter()
            if progress is not None and now - last >= 2.0:
                done = block * BLOCK_ROWS + take
                print(f"gen: {path.name}: {done:,}/{rows:,} rows, "
                      f"{done / (now - start):,.0f} rows/s", file=progress, flush=True)
                last = now
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {"positives": positives, "features": features, "seconds": seconds}
    if keep:
        result["labels"] = np.concatenate([k[0] for k in kept])
        result["scores"] = np.concatenate([k[1] for k in kept])
    return result


def generate(outdir: str | os.PathLike[str], config: SynthConfig,
             progress: TextIO | None = None) -> dict[str, Any]:
    """Write ``train.svm``, ``test.svm`` and ``truth.json`` into ``outdir``.

    Returns the content of ``truth.json`` (plus ``"seconds"``, the wall time,
    which is not stored so that the files stay deterministic). Progress lines
    go to ``progress`` (e.g. ``sys.stderr``) every 2 s when it is given.
    Memory is bounded by one block, except for the test split whose labels and
    true scores are kept to compute the Bayes-optimal metrics (16 B a row).
    """
    start = time.perf_counter()
    design = make_design(config)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = ("train.svm", "test.svm", "truth.json")
    parts = [out / f"{name}.part" for name in names]
    try:  # all three files renamed at the end: never a mix of two data sets
        truth = _generate(out, design, config, progress)
        parts[2].write_text(json.dumps(truth, indent=1) + "\n")
        for part, name in zip(parts, names, strict=True):
            os.replace(part, out / name)
    except BaseException:
        for part in parts:
            part.unlink(missing_ok=True)
        raise
    return {**truth, "seconds": time.perf_counter() - start}


def _generate(out: Path, design: Design, config: SynthConfig,
              progress: TextIO | None) -> dict[str, Any]:
    """Write both splits' parts; the content of ``truth.json``."""
    train = _write_split(design, out / "train.svm", _TRAIN, config.rows, progress, keep=False)
    test = _write_split(design, out / "test.svm", _TEST, config.test_rows, progress, keep=True)
    y, prob = test["labels"], _sigmoid(test["scores"])
    test_rate = test["positives"] / config.test_rows
    clipped = np.clip(prob, 1e-15, 1.0 - 1e-15)
    entropy = -(clipped * np.log(clipped) + (1.0 - clipped) * np.log1p(-clipped))
    fields: list[dict[str, Any]] = [
        {"field": j, "kind": "numeric", "slot": j, "log_mu": float(design.numeric_mu[j]),
         "log_sd": float(design.numeric_sd[j]), "weight": float(design.numeric_weights[j])}
        for j in range(config.n_numeric)
    ] + [
        {"field": config.n_numeric + f, "kind": "categorical",
         "cardinality": int(design.cardinalities[f]), "zipf_exponent": float(design.exponents[f]),
         "hash_key": int(design.field_keys[f])}
        for f in range(config.n_categorical)
    ]
    truth: dict[str, Any] = {
        "format": "ftrl-ps-synth/1",
        "config": asdict(config),
        "files": {"train": "train.svm", "test": "test.svm"},
        "labels": "0/1",
        "model": {
            "bias": design.bias,
            "numeric_slots": config.n_numeric,
            "categorical_zero_fraction": CAT_ZERO_FRACTION,
            "categorical_laplace_scale": CAT_LAPLACE_SCALE,
            "weight_key": int(design.weight_key),
            "fields": fields,
        },
        "stats": {
            "train_positive_rate": train["positives"] / config.rows,
            "test_positive_rate": test_rate,
            "train_mean_features": train["features"] / config.rows,
            "bayes_test_logloss": logloss(y, prob),
            "bayes_test_entropy": float(entropy.mean()),
            "bayes_test_auc": auc(y, prob),
            "constant_test_logloss": logloss(y, np.full(y.shape, test_rate)),
        },
    }
    return truth
