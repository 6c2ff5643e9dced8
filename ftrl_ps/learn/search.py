"""The search of ``ftrl-ps tune``: successive halving over FTRL settings and passes.

Validation scheme (no test data is ever read)
---------------------------------------------
The rows of TRAIN are split in two: ``validation="every"`` (the default) holds
back every m-th row (m = round(1 / holdout), every 5th for the default 0.2),
``validation="tail"`` the last ``holdout`` share of the rows (for time-ordered
logs, where the future should be scored). The other rows train, in file
order; the held-back rows are only scored. Every candidate setting is trained
pass after pass, all candidates in the same pass over the rows
(:class:`~ftrl_ps.core.multi.MultiFTRL`); after each pass the log loss of
every candidate on the held-back rows is recorded, so a candidate yields one
*trial* per pass count. The trial with the lowest held-back log loss wins:
its setting and its number of passes ("every" is the default because files
are often sorted, by label or source: the last fifth of agaricus has 69 %
positives against 43 % before it).

Candidates
----------
Candidate 0 is always the default setting (alpha 0.1, beta 1, l1 1, l2 1), so
the winner's held-back loss is never above the defaults'. The others are the
points of a Halton sequence (bases 2, 3, 5, 7) over log-uniform ranges of
alpha, l2, l1 and beta (:data:`RANGES`): every prefix of the sequence spreads
over the whole box, so a smaller budget tries fewer, still spread-out, settings.

Successive halving
------------------
Rung ``i`` trains the candidates still in the race up to ``2**i`` passes
(1, 2, 4, ...) and keeps the better half of them by their best held-back loss
so far (Jamieson & Talwalkar 2016; Li et al. 2017): good settings get many
passes, poor ones few.

Budget and cost model
---------------------
The budget is in *default runs*: ``budget=8`` (the default of ``ftrl-ps
tune``) lets the whole run (start-up, parsing TRAIN once, the search and
training the final model) cost at most 8 times one default ``ftrl-ps train
TRAIN`` by the cost model below; the rest of a 10x allowance is room for the
model's error (benchmarks/RESULTS.md). Costs are counted, not timed, so the
same data and budget give the same search on any machine, in units of one
model updating one feature (F = features of the rows, the bias included;
measured on the 2-core development machine, where a unit is ~14 ns of wall
time with the search's two threads):

=====================================  =============================
one default ``ftrl-ps train`` run      ``START + DEFAULT_PASS * F``
tune's own start-up                    ``TUNE_START``
parsing TRAIN once (into memory)       ``PARSE * F`` (and numbering its keys)
one pass of K models over rows         ``(1.4 + K / 10) * F``
scoring K models on rows               ``(0.9 + K / 20) * F``
training the final model, one pass     ``FINAL_PASS * F``
=====================================  =============================

with ``START`` = 9.3e6 (a default run's start-up: 0.13 s for 1,000 rows),
``DEFAULT_PASS`` = 0.92 (parsing and training overlap on two threads: 0.62 s
for 1M generated rows, 37.7M features), ``TUNE_START`` = 1.3e7 (0.18 s for
1,000 rows, its K-model kernels compiled ahead of time), ``PARSE`` = 2 (0.6 s
for the 1M rows on memory the process had just used, 2.2 s on memory this VM
had to fault in) and ``FINAL_PASS`` = 1.2 (0.6 s a pass). The K-model figures
were measured for float32 state and still hold: 13-14 ns per unit for K = 56,
28 and 14 on the 1M rows (2026-12-03, session 26; the constants before it
priced a default run at 2.2 s, ~3.5x what it costs now).
:func:`plan` reserves the final model's training (``FINAL_PASS * max passes * F``) and
picks the most passes (up to ``max_epochs``) that still let at least
:data:`MIN_CANDIDATES` start, then as many candidates as fit (at most
:data:`MAX_CANDIDATES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ftrl_ps.core.multi import MultiFTRL
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.errors import ConfigError

__all__ = [
    "DEFAULT_PASS",
    "FINAL_PASS",
    "MAX_CANDIDATES",
    "MIN_CANDIDATES",
    "PARSE",
    "RANGES",
    "START",
    "TUNE_START",
    "VALIDATIONS",
    "Plan",
    "SearchResult",
    "Trial",
    "candidates",
    "default_run_cost",
    "fixed_cost",
    "halton",
    "holdout_split",
    "plan",
    "score_cost",
    "successive_halving",
    "train_cost",
]

#: log-uniform search ranges (low, high) of the Halton candidates, in the order
#: of the bases 2, 3, 5, 7 (alpha gets the most even spread)
RANGES: dict[str, tuple[float, float]] = {
    "alpha": (0.01, 20.0),
    "l2": (0.001, 30.0),
    "l1": (0.001, 3.0),
    "beta": (0.1, 10.0),
}
_BASES = (2, 3, 5, 7)
MIN_CANDIDATES = 16
MAX_CANDIDATES = 64
START = 9.3e6
DEFAULT_PASS = 0.92
TUNE_START = 1.3e7
PARSE = 2.0
FINAL_PASS = 1.2
VALIDATIONS = ("every", "tail")


def default_run_cost(features: int) -> float:
    """Cost of one default ``ftrl-ps train`` run (see the module docstring)."""
    return START + DEFAULT_PASS * features


def fixed_cost(features: int, passes: int) -> float:
    """Cost of a tune run beside its search: start-up, parsing TRAIN and training
    the final model for ``passes`` passes."""
    return TUNE_START + PARSE * features + FINAL_PASS * passes * features


def train_cost(features: int, models: int) -> float:
    return features * (1.4 + models / 10.0)


def score_cost(features: int, models: int) -> float:
    return features * (0.9 + models / 20.0)


def halton(index: int, base: int) -> float:
    """The ``index``-th (1-based) point of the van der Corput sequence in ``base``.

    >>> [halton(i, 2) for i in (1, 2, 3)]
    [0.5, 0.25, 0.75]
    """
    f, r = 1.0, 0.0
    while index > 0:
        f /= base
        r += f * (index % base)
        index //= base
    return r


def candidates(count: int) -> list[FTRLParams]:
    """The defaults, then ``count - 1`` Halton points over :data:`RANGES` (4 digits).

    >>> [p.as_dict() for p in candidates(2)]  # doctest: +NORMALIZE_WHITESPACE
    [{'alpha': 0.1, 'beta': 1.0, 'l1': 1.0, 'l2': 1.0},
     {'alpha': 0.4472, 'beta': 0.1931, 'l1': 0.004959, 'l2': 0.03107}]
    """
    if count < 1:
        raise ConfigError(f"need at least one candidate, got {count}")
    out = [FTRLParams()]
    for i in range(1, count):
        values = {}
        for (name, (lo, hi)), base in zip(RANGES.items(), _BASES, strict=True):
            u = halton(i, base)
            values[name] = float(f"{math.exp(math.log(lo) + u * math.log(hi / lo)):.4g}")
        out.append(FTRLParams(**values))
    return out


def holdout_split(rows: int, holdout: float, validation: str) -> tuple[np.ndarray, np.ndarray]:
    """``(train, held)``: row numbers that train (in file order) and that are scored.

    >>> [a.tolist() for a in holdout_split(10, 0.2, "every")]
    [[0, 1, 2, 3, 5, 6, 7, 8], [4, 9]]
    >>> [a.tolist() for a in holdout_split(10, 0.2, "tail")]
    [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9]]
    """
    if validation not in VALIDATIONS:
        raise ConfigError(f"validation must be one of {VALIDATIONS}, got {validation!r}")
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"holdout must be between 0 and 1, got {holdout}")
    if validation == "every" and holdout > 0.5:  # was quietly one row in 2
        raise ConfigError(f"holdout {holdout} with validation 'every' (every k-th row held "
                          "back, k >= 2) can be at most 0.5; 'tail' holds back any share")
    every = np.arange(rows, dtype=np.int64)
    if validation == "every":
        m = max(2, round(1.0 / holdout))
        held = every % m == m - 1
    else:
        held = every >= rows - round(rows * holdout)
    train, scored = every[~held], every[held]
    if not train.size or not scored.size:
        raise ConfigError(f"{rows} row(s) are too few to tune: need rows to train and to score")
    return train, scored


@dataclass(frozen=True)
class Plan:
    """How many candidates start and the pass count of each rung (successive halving)."""

    candidates: int
    rungs: tuple[int, ...]

    def survivors(self, rung: int) -> int:
        """Candidates trained in rung ``rung`` (0-based): half of the rung before."""
        return max(1, self.candidates >> rung)

    def cost(self, train_features: int, held_features: int) -> float:
        """Cost of the search (units of the module docstring)."""
        total, done = 0.0, 0
        for i, passes in enumerate(self.rungs):
            k = self.survivors(i)
            total += (passes - done) * (train_cost(train_features, k)
                                         + score_cost(held_features, k))
            done = passes
        return total


def plan(budget: float, max_epochs: int, features: int, train_features: int,
         held_features: int) -> Plan:
    """The plan of a search of ``budget`` default runs (module docstring).

    >>> p = plan(10, 16, features=10**6, train_features=800_000, held_features=200_000)
    >>> p.rungs, p.candidates
    ((1, 2, 4, 8, 16), 64)
    >>> plan(10, 16, features=10**8, train_features=8 * 10**7, held_features=2 * 10**7)
    Plan(candidates=22, rungs=(1, 2))
    """
    if budget <= 0 or max_epochs < 1:
        raise ConfigError("plan needs budget > 0 and max_epochs >= 1")
    total = budget * default_run_cost(features)
    tops = [1]
    while tops[-1] < max_epochs:
        tops.append(min(2 * tops[-1], max_epochs))
    fallback: Plan | None = None
    for depth in range(len(tops), 0, -1):
        rungs = tuple(tops[:depth])
        left = total - fixed_cost(features, rungs[-1])
        fits = [n for n in range(1, MAX_CANDIDATES + 1)
                if Plan(n, rungs).cost(train_features, held_features) <= left]
        if fits and fits[-1] >= MIN_CANDIDATES:
            return Plan(fits[-1], rungs)
        if fits and fallback is None:
            fallback = Plan(fits[-1], rungs)
    if fallback is not None:
        return fallback
    least = (fixed_cost(features, 1)
             + Plan(1, (1,)).cost(train_features, held_features)) / default_run_cost(features)
    raise ConfigError(f"budget {budget:g} is too small for even one setting and one pass "
                      f"(that takes {math.ceil(least * 10) / 10:g})")


@dataclass(frozen=True)
class Trial:
    """One candidate after ``epochs`` passes: its log loss on the held-back rows."""

    candidate: int
    params: FTRLParams
    epochs: int
    holdout_logloss: float


@dataclass
class SearchResult:
    """Every trial and the cost spent (units of the module docstring)."""

    trials: list[Trial] = field(default_factory=list)
    cost: float = 0.0

    @property
    def best(self) -> Trial:
        """The trial with the lowest held-back loss (ties: fewer passes, earlier candidate)."""
        return min(self.trials, key=lambda t: (t.holdout_logloss, t.epochs, t.candidate))

    def best_of(self, candidate: int) -> Trial:
        mine = [t for t in self.trials if t.candidate == candidate]
        return min(mine, key=lambda t: (t.holdout_logloss, t.epochs))


def successive_halving(
    rows: Batch,
    keys: int,
    train: np.ndarray,
    held: np.ndarray,
    settings: list[FTRLParams],
    schedule: Plan,
    *,
    dtype: str = "float32",
    threads: int = 1,
    on_pass: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """Run ``schedule`` over ``settings`` on ``rows`` (compact keys below ``keys - 1``).

    Rows ``train`` (row numbers, in that order) train, rows ``held`` are scored.
    With ``threads > 1`` the models are split in that many groups trained side
    by side (the kernels release the GIL); results do not depend on it.
    ``on_pass(epoch, models)`` is called before each pass (progress display).
    """
    if schedule.candidates > len(settings):
        raise ConfigError(f"plan wants {schedule.candidates} settings, got {len(settings)}")
    result = SearchResult()
    groups = MultiFTRL.fresh_groups(keys, settings[: schedule.candidates], max(1, threads),
                                    dtype=dtype)
    labels, indptr, indices, values, train = groups[0]._check(
        rows.labels, rows.indptr, rows.indices, rows.values, train)
    held = groups[0]._check(labels, indptr, indices, values, held)[4]
    f_train = int(np.diff(indptr)[train].sum()) + train.size
    f_held = int(np.diff(indptr)[held].sum()) + held.size
    alive = list(range(schedule.candidates))

    def one_pass(group: MultiFTRL) -> np.ndarray:
        group._fit(labels, indptr, indices, values, train)
        return group._logloss(labels, indptr, indices, values, held)

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for rung, passes in enumerate(schedule.rungs):
            for epoch in range(done + 1, passes + 1):
                if on_pass is not None:
                    on_pass(epoch, len(alive))
                loss = np.concatenate(list(pool.map(one_pass, groups))) / held.size
                result.cost += train_cost(f_train, len(alive)) + score_cost(f_held, len(alive))
                for k, c in enumerate(alive):
                    result.trials.append(Trial(c, settings[c], epoch, float(loss[k])))
            done = passes
            if rung + 1 < len(schedule.rungs):
                keep = min(schedule.survivors(rung + 1), len(alive))
                ranked = sorted(range(len(alive)),
                                key=lambda k: (result.best_of(alive[k]).holdout_logloss, alive[k]))
                chosen = sorted(ranked[:keep])
                groups = MultiFTRL.regroup(groups, chosen, max(1, threads))
                alive = [alive[k] for k in chosen]
    return result
