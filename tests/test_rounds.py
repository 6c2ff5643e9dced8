"""Adaptive round length (ftrl_ps.ps.rounds) and the worker loop that uses it."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ftrl_ps.cli import build_parser
from ftrl_ps.cli._common import options_from
from ftrl_ps.cluster.local import LocalClusterOptions, _worker_options
from ftrl_ps.core.ftrl import FTRL, FTRLParams
from ftrl_ps.ps.rounds import GROW_AFTER, MAX_ROUND_SCALE, RoundLength
from ftrl_ps.ps.worker import Worker, WorkerConfig
from ftrl_ps.ps.worker_main import WorkerOptions, worker_config
from tests.test_ftrl import random_rows
from tests.test_worker import MemoryServer, as_batches


def _wait(r: RoundLength, trained: float, waited: float) -> None:
    start = r._since + trained
    r.waited(start, start + waited)


def test_grows_by_the_waited_share_only_after_waits_in_a_row() -> None:
    r = RoundLength()
    for _ in range(GROW_AFTER - 1):
        _wait(r, 0.1, 0.25)
        assert r.factor == 1  # a single long wait may be noise
    _wait(r, 0.1, 0.25)
    assert r.scale == pytest.approx(3.5)
    _wait(r, 0.1, 0.05)  # a wait, but short: no growth, and the streak ends
    assert r.scale == pytest.approx(3.5)
    _wait(r, 0.1, 0.25)
    assert r.scale == pytest.approx(3.5)


def test_shrinks_to_one_when_the_waits_stop_and_is_capped() -> None:
    r = RoundLength()
    for _ in range(20):
        _wait(r, 0.01, 1.0)
    assert r.factor == MAX_ROUND_SCALE
    for _ in range(30):
        _wait(r, 0.1, 0.0)
    assert r.factor == 1


def test_disabled_never_changes() -> None:
    r = RoundLength(enabled=False)
    for _ in range(10):
        _wait(r, 0.01, 1.0)
    assert r.factor == 1


class SlowClockServer(MemoryServer):
    """A server whose clock tick waits as a faster worker's would for a straggler."""

    def __init__(self, size: int, wait: float) -> None:
        super().__init__(size)
        self.wait = wait
        self.push_rows: list[int] = []

    def clock(self, stats: dict[str, Any] | None = None) -> None:
        time.sleep(self.wait)
        super().clock(stats)


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_worker_that_keeps_waiting_makes_longer_rounds(adaptive: bool) -> None:
    """Same rows, same result either way; with adaptive rounds far fewer ticks."""
    rng = np.random.default_rng(5)
    data = random_rows(rng, 2000, 64)
    server = SlowClockServer(65, wait=0.02)
    cfg = WorkerConfig(batch_size=10, fetch_step=2, push_step=2, adaptive_rounds=adaptive)
    worker = Worker(server, 6, FTRLParams(), cfg)
    worker.train_batches(iter(as_batches(*data, per=100)))
    worker.push()
    assert worker.report.rows == 2000
    fixed = 2000 // (10 * 2)
    if adaptive:
        # training 20 rows takes far less than the 20 ms wait: rounds grow to the cap
        assert server.clocks < fixed / 4
        assert worker.round_length.factor > 4
    else:
        assert server.clocks == fixed
    # one worker of any round length is one process: every row applied exactly once
    ref = FTRL(6, FTRLParams(), dtype="float64")
    assert worker.report.loss_sum == pytest.approx(ref.fit_rows(*data), rel=1e-9)
    np.testing.assert_allclose(server.n, ref.n, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(server.z, ref.z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("command, cls", [
    (["train", "t.svm", "--workers", "4"], LocalClusterOptions),
    (["worker", "--server", "http://x", "--input", "t.svm", "--worker-index", "0",
      "--num-workers", "4"], WorkerOptions),
])
def test_the_flag_reaches_the_worker_config(command, cls) -> None:
    parser = build_parser()
    assert options_from(cls, parser.parse_args(command)).adaptive_rounds is None  # auto
    for flag, value in (("--adaptive-rounds", True), ("--no-adaptive-rounds", False)):
        opts = options_from(cls, parser.parse_args([*command, flag]))
        assert opts.adaptive_rounds is value
        if cls is WorkerOptions:
            assert worker_config(opts).adaptive_rounds is value
        else:
            opts = dataclasses.replace(opts, batch_size=100)
            assert _worker_options(opts, ["http://x"], FTRLParams(), 20, 0, Path("m.json"),
                                   "float32").adaptive_rounds is value


@pytest.mark.parametrize("staleness, adaptive", [(0, False), (1, True), (3, True),
                                                 (None, False)])
def test_by_default_rounds_adapt_at_a_bounded_staleness(staleness, adaptive) -> None:
    """Unless the flag says otherwise: on at s >= 1, off at BSP and asynchronously
    (and off against servers that do not say)."""
    server = SlowClockServer(65, wait=0.0)
    server.server_settings = {"staleness": staleness}
    assert Worker(server, 6, FTRLParams(), WorkerConfig()).round_length.enabled is adaptive
    for given in (True, False):
        cfg = WorkerConfig(adaptive_rounds=given)
        assert Worker(server, 6, FTRLParams(), cfg).round_length.enabled is given
    assert Worker(SlowClockServer(65, 0.0), 6, FTRLParams(),
                  WorkerConfig()).round_length.enabled is False


def test_the_service_reads_auto_or_a_switch() -> None:
    from services.worker import SERVICE

    env = {"FTRL_PS_SERVER": "http://s0:7000", "FTRL_PS_INPUT": "/d/t.svm",
           "FTRL_PS_NUM_WORKERS": "2", "FTRL_PS_WORKER_INDEX": "0"}
    assert SERVICE.load([], env).adaptive_rounds is None
    for text, value in (("auto", None), ("on", True), ("0", False)):
        assert SERVICE.load([], {**env, "FTRL_PS_ADAPTIVE_ROUNDS": text}).adaptive_rounds \
            is value
