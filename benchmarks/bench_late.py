"""Merge rules in few, long rounds, without the noise of the machine: a replayed schedule.

Usage::

    python benchmarks/bench_late.py TRAIN TEST [--bits 18] [--workers 3]
        [--batch-size 500] [--round-batches 4] [--schedules 20]
        [--rules compose,compose-late,threshold,compose-n]

The cluster's outcome in runs of few, long rounds depends on the order in
which the workers' pulls and pushes reach the shard, which the machine's
load decides (docs/algorithm.md section 7). This script replays that order
on purpose: the real :class:`~ftrl_ps.ps.worker.Worker` objects train their
shares of TRAIN (contiguous, as the launcher splits a file) against one
in-memory float64 :class:`~ftrl_ps.ps.store.ParameterStore`; each worker
pulls at the start of a round and pushes at its end, and the rounds' start
offsets and durations are drawn at random per *schedule* (seeded), the same
schedules for every rule. It prints the test log loss of one process and,
per rule, the median and worst over the schedules minus one process.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import sys
from typing import Any

import numpy as np

from ftrl_ps.core.ftrl import FTRL, FTRLParams
from ftrl_ps.core.metrics import logloss
from ftrl_ps.data.libsvm import read_all
from ftrl_ps.data.minibatch import slice_rows
from ftrl_ps.ps.layout import Layout
from ftrl_ps.ps.local_client import LocalClient
from ftrl_ps.ps.store import ParameterStore
from ftrl_ps.ps.worker import Worker, WorkerConfig


def run(train: Any, test: Any, bits: int, rule: str, workers: int, batch: int,
        per_round: int, seed: int) -> float:
    """Test log loss of one replayed cluster run."""
    params = FTRLParams()
    shard = LocalClient(ParameterStore(  # one float64 store, no network, no clock
        Layout(bits, group_size=64), dtype="float64",
        merge_rule=rule,
        ftrl=(params.alpha, params.beta, params.l1, params.l2)))
    cfg = WorkerConfig(batch_size=batch, fetch_step=per_round, push_step=per_round,
                       merge_rule=rule, num_workers=workers)
    rng = np.random.default_rng(seed)
    rows = train.labels.size
    bounds = np.linspace(0, rows, workers + 1).astype(int)
    plans, events = [], []
    for i in range(workers):
        batches = [slice_rows(train, a, min(a + batch, bounds[i + 1]))
                   for a in range(bounds[i], bounds[i + 1], batch)]
        rounds = [batches[a:a + per_round] for a in range(0, len(batches), per_round)]
        plans.append((Worker(shard, bits, params, cfg), rounds))
        events.append((rng.uniform(0, 1.0), i, 0, "pull"))
    heapq.heapify(events)
    open_rounds: dict[int, Any] = {}
    while events:
        t, i, r, what = heapq.heappop(events)
        worker, rounds = plans[i]
        if what == "pull":
            open_rounds[i] = worker._open(rounds[r])
            heapq.heappush(events, (t + rng.uniform(0.5, 1.5), i, r, "push"))
        else:
            rnd = open_rounds.pop(i)
            for _ in rounds[r]:
                worker._step(rnd)
            worker.push()
            if r + 1 < len(rounds):
                heapq.heappush(events, (t, i, r + 1, "pull"))
    model = FTRL(bits, params, dtype="float64")
    n, z = shard.store.pull(np.arange(model.state.shape[0]))
    model.state[:, 0], model.state[:, 1] = n, z
    return logloss(test.labels, model.predict_rows(test.indptr, test.indices, test.values))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("train", help="training file (libsvm), cut into one contiguous share "
                   "per worker")
    p.add_argument("test", help="test file (libsvm) the log loss is measured on")
    p.add_argument("--bits", type=int, default=18,
                   help="hash bits of the models and the store (default %(default)s)")
    p.add_argument("--workers", type=int, default=3,
                   help="workers replayed (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=500,
                   help="rows per minibatch (default %(default)s)")
    p.add_argument("--round-batches", type=int, default=4,
                   help="minibatches per round: a worker pulls before them and pushes after "
                   "(default %(default)s)")
    p.add_argument("--schedules", type=int, default=20,
                   help="seeded random schedules, the same for every rule "
                   "(default %(default)s)")
    p.add_argument("--rules", default="compose,compose-late,threshold,compose-n",
                   help="comma-separated merge rules to replay (ftrl_ps.ps.merge.RULES; "
                   "default %(default)s)")
    args = p.parse_args(argv)
    train, test = read_all(args.train, args.bits), read_all(args.test, args.bits)
    single = FTRL(args.bits, FTRLParams(), dtype="float64")
    single.fit_rows(train.labels, train.indptr, train.indices, train.values)
    base = logloss(test.labels, single.predict_rows(test.indptr, test.indices, test.values))
    print(f"one process: test logloss {base:.5f}")
    for rule in args.rules.split(","):
        diffs = [run(train, test, args.bits, rule, args.workers, args.batch_size,
                     args.round_batches, seed) - base for seed in range(args.schedules)]
        print(f"{rule:13s} median {statistics.median(diffs):+.4f}  worst {max(diffs):+.4f}  "
              f"best {min(diffs):+.4f}  over {len(diffs)} schedules", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
