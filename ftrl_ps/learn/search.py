"""The search of ``ftrl-ps tune``: successive halving over FTRL settings and passes.

Validation scheme (no test data is ever read)
---------------------------------------------
The rows of TRAIN are split in file order: the first ``1 - holdout`` share
(the *head*) trains, the last ``holdout`` share (the *tail*) only scores. For
time-ordered logs (CTR data) the tail is the future of the head, as a test set
would be. Every candidate setting is trained on the head, pass after pass,
all of them in the same pass over the rows (:class:`~ftrl_ps.core.multi.MultiFTRL`);
after each pass every candidate's log loss on the tail is recorded, so one
candidate yields a *trial* per pass count. The trial with the lowest tail log
loss wins: its setting and its number of passes.

Candidates
----------
Candidate 0 is always the default setting (alpha 0.1, beta 1, l1 1, l2 1), so
the winner's tail loss is never above the defaults' (one pass). The others are
the points of a Halton sequence (bases 2, 3, 5, 7) over log-uniform ranges of
alpha, l2, l1 and beta (:data:`RANGES`): every prefix of the sequence spreads
over the whole box, so a smaller budget tries fewer, still spread-out, settings.

Successive halving
------------------
Rung ``i`` trains the candidates still in the race up to ``eta**i`` passes
(1, 2, 4, ... with the default ``eta`` 2) and keeps the best ``1/eta`` of them
by their best tail loss so far (Jamieson & Talwalkar 2016; Li et al. 2017).
Good settings thus get many passes and poor ones few. :func:`plan` sizes the
first rung from the budget: the training work of the whole search is at most
``budget`` passes of one model over all rows of TRAIN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ftrl_ps.core.multi import MultiFTRL
from ftrl_ps.core.params import FTRLParams
from ftrl_ps.data.batch import Batch
from ftrl_ps.errors import ConfigError

__all__ = [
    "RANGES",
    "Plan",
    "SearchResult",
    "Trial",
    "candidates",
    "halton",
    "plan",
    "successive_halving",
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
    """The defaults, then ``count - 1`` Halton points over :data:`RANGES`.

    >>> [p.as_dict() for p in candidates(2)]  # doctest: +NORMALIZE_WHITESPACE
    [{'alpha': 0.1, 'beta': 1.0, 'l1': 1.0, 'l2': 1.0},
     {'alpha': 0.4472, 'beta': 0.1931, 'l1': 0.0048, 'l2': 0.0311}]
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


@dataclass(frozen=True)
class Plan:
    """How many candidates start, and the pass count of each rung."""

    candidates: int
    rungs: tuple[int, ...]
    eta: int

    def survivors(self, rung: int) -> int:
        """Candidates trained in rung ``rung`` (0-based)."""
        return max(1, self.candidates // self.eta**rung)

    def work(self, head_fraction: float) -> float:
        """Training work in passes of one model over all rows."""
        total, done = 0, 0
        for i, passes in enumerate(self.rungs):
            total += self.survivors(i) * (passes - done)
            done = passes
        return total * head_fraction


def plan(budget: float, max_epochs: int, head_fraction: float, eta: int = 2,
         max_candidates: int | None = None) -> Plan:
    """The largest plan whose work is at most ``budget`` passes over all rows.

    Rungs run 1, eta, eta**2, ... passes up to ``max_epochs`` (the last rung is
    ``max_epochs`` itself); fewer rungs are used when even one candidate per
    rung would not fit.

    >>> p = plan(60, 16, 0.8)
    >>> p.rungs, p.candidates, p.work(0.8) <= 60
    ((1, 2, 4, 8, 16), 25, True)
    """
    if budget <= 0 or max_epochs < 1 or eta < 2 or not 0 < head_fraction <= 1:
        raise ConfigError("plan needs budget > 0, max_epochs >= 1, eta >= 2, 0 < head <= 1")
    rungs = [1]
    while rungs[-1] < max_epochs:
        rungs.append(min(rungs[-1] * eta, max_epochs))
    while rungs:
        best = None
        count = 1
        while True:
            p = Plan(count, tuple(rungs), eta)
            if p.work(head_fraction) > budget or (max_candidates and count > max_candidates):
                break
            best, count = p, count + 1
        if best is not None:
            return best
        rungs.pop()
    raise ConfigError(
        f"budget {budget:g} is too small: one pass of one model over the training share "
        f"costs {head_fraction:g}"
    )


@dataclass(frozen=True)
class Trial:
    """One setting after ``epochs`` passes over the head: its tail log loss."""

    params: FTRLParams
    epochs: int
    holdout_logloss: float
    candidate: int


@dataclass
class SearchResult:
    """Every trial, the best one, and the training work done."""

    trials: list[Trial] = field(default_factory=list)
    model_rows: int = 0

    @property
    def best(self) -> Trial:
        return min(self.trials, key=lambda t: (t.holdout_logloss, t.epochs, t.candidate))

    def best_of(self, candidate: int) -> Trial:
        mine = [t for t in self.trials if t.candidate == candidate]
        return min(mine, key=lambda t: (t.holdout_logloss, t.epochs))


def successive_halving(
    rows: Batch,
    keys: int,
    split: int,
    settings: list[FTRLParams],
    schedule: Plan,
    *,
    dtype: str = "float32",
    on_pass: Callable[[int, int, int], None] | None = None,
) -> SearchResult:
    """Run ``schedule`` over ``settings`` on ``rows`` (compact keys below ``keys - 1``).

    Rows ``0..split`` train, ``split..rows`` score. ``on_pass(rung, pass,
    models)`` is called before each pass (for a progress display).
    """
    if not 0 < split < rows.rows:
        raise ConfigError(f"need rows to train and to score, got split {split} of {rows.rows}")
    result = SearchResult()
    alive = list(range(len(settings)))
    multi = MultiFTRL(keys, settings, dtype=dtype)
    args = (rows.labels, rows.indptr, rows.indices, rows.values)
    multi.fit(*args, 0, 0)  # validates the rows once; the loops below use the fast path
    done = 0
    for rung, passes in enumerate(schedule.rungs):
        for epoch in range(done + 1, passes + 1):
            if on_pass is not None:
                on_pass(rung, epoch, multi.size)
            multi._fit(*args, 0, split)
            result.model_rows += split * multi.size
            held = multi.logloss(*args, split, rows.rows) / (rows.rows - split)
            for k, c in enumerate(alive):
                result.trials.append(Trial(settings[c], epoch, float(held[k]), c))
        done = passes
        if rung + 1 < len(schedule.rungs):
            keep = min(schedule.survivors(rung + 1), len(alive))
            ranked = sorted(range(len(alive)), key=lambda k: result.best_of(alive[k]).holdout_logloss)
            chosen = sorted(ranked[:keep])
            multi.keep(chosen)
            alive = [alive[k] for k in chosen]
    return result
