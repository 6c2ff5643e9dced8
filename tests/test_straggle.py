"""Fault injection for experiments (ftrl_ps.ps.straggle) and its command-line flags."""

from __future__ import annotations

import pytest

from ftrl_ps.cli import build_parser
from ftrl_ps.cli._common import options_from
from ftrl_ps.cluster.local import LocalClusterOptions
from ftrl_ps.errors import ConfigError
from ftrl_ps.ps.straggle import StraggleConfig, Straggler, parse_worker_list
from ftrl_ps.ps.worker_main import WorkerOptions


def _draws(config: StraggleConfig, index: int, ticks: int = 200) -> list[float]:
    s = Straggler(config, index)
    return [s.before_tick() for _ in range(ticks)]


def test_sleeps_are_seeded_by_worker_index_and_seed() -> None:
    config = StraggleConfig(prob=0.25, delay=1e-4, seed=3)
    a, again = _draws(config, 0), _draws(config, 0)
    assert a == again  # the same run straggles the same way
    assert a != _draws(config, 1)  # another worker, other draws
    assert a != _draws(StraggleConfig(prob=0.25, delay=1e-4, seed=4), 0)
    assert 25 <= sum(1 for d in a if d) <= 75  # about a quarter of 200 ticks
    assert all(d in (0.0, 1e-4) for d in a)


def test_only_the_chosen_workers_straggle_and_prob_one_always() -> None:
    config = StraggleConfig(prob=1.0, delay=1e-4, workers="1,3")
    assert all(_draws(config, 1, 20)) and all(_draws(config, 3, 20))
    assert not any(_draws(config, 0, 20))
    s = Straggler(config, 1)
    s.before_tick()
    assert (s.sleeps, s.seconds) == (1, 1e-4)


@pytest.mark.parametrize("kw", [{"prob": 1.5}, {"prob": -0.1}, {"delay": -1.0},
                                {"delay": float("inf")}, {"workers": "0,a"},
                                # time.sleep's OverflowError / default_rng's ValueError in
                                # every worker, after it registered
                                {"delay": 1e12}, {"delay": 3600.5}, {"seed": -1},
                                {"workers": ""}, {"workers": " "}])
def test_bad_configs_are_refused(kw) -> None:
    with pytest.raises(ConfigError):
        StraggleConfig(**kw)


def test_worker_list_parsing() -> None:
    assert parse_worker_list("3, 1,3") == (1, 3)
    assert parse_worker_list(None) is None  # every worker
    with pytest.raises(ConfigError, match="empty"):  # an empty variable: not "all"
        parse_worker_list(" ")


def test_the_longest_delay_and_any_seed_from_zero_work() -> None:
    assert StraggleConfig(prob=0.5, delay=3600.0, seed=0).enabled
    assert Straggler(StraggleConfig(prob=0.5, delay=0.1, seed=10**25), 3).active


def test_indices_outside_the_workers_are_refused() -> None:
    config = StraggleConfig(prob=1.0, delay=0.1, workers="0,5,7")
    config.check_workers(8)
    with pytest.raises(ConfigError, match=r"5,7: not a worker index of 2 worker\(s\)"):
        config.check_workers(2)
    StraggleConfig(prob=1.0, delay=0.1).check_workers(1)  # all: any number


def test_settings_that_do_nothing_are_named() -> None:
    assert StraggleConfig().idle_reason() is None  # nothing asked
    assert StraggleConfig(prob=0.5, delay=0.1).idle_reason() is None
    assert "give --straggle-prob" in (StraggleConfig(delay=0.3).idle_reason() or "")
    assert "give --straggle-delay" in (StraggleConfig(prob=0.3).idle_reason() or "")


@pytest.mark.parametrize("command, cls", [
    (["train", "t.svm", "--workers", "4"], LocalClusterOptions),
    (["worker", "--server", "http://x", "--input", "t.svm", "--worker-index", "0",
      "--num-workers", "4"], WorkerOptions),
])
def test_flags_reach_the_typed_options(command, cls) -> None:
    args = build_parser().parse_args([*command, "--straggle-prob", "0.25", "--straggle-delay",
                                      "0.3", "--straggle-workers", "0,2", "--seed", "7"])
    opts = options_from(cls, args)
    assert (opts.straggle_prob, opts.straggle_delay, opts.straggle_workers, opts.seed) == (
        0.25, 0.3, "0,2", 7)


WORKER = ["worker", "--server", "http://127.0.0.1:9", "--worker-index", "0"]


@pytest.mark.parametrize("command", [["train", "t.svm", "--workers", "2"],
                                     [*WORKER, "--input", "t.svm", "--num-workers", "2"]])
@pytest.mark.parametrize("flags, named", [
    (["--straggle-prob", "1.5"], "straggle"), (["--straggle-delay", "-1"], "straggle"),
    (["--straggle-workers", "0,x"], "straggle"), (["--straggle-delay", "1e12"], "3600"),
    (["--seed", "-1"], "--seed"), (["--straggle-workers", ""], "empty list"),
])
def test_bad_flags_exit_2(command, flags, named, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*command, *flags])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["train", "{data}", "--workers", "2", "-q"],
    [*WORKER, "--input", "{data}", "--num-workers", "2"],  # checked before any server
])
def test_straggle_workers_beyond_the_workers_exit_2(command, tmp_path, capsys) -> None:
    """An index >= the number of workers never straggles: refused up front (not a
    run that silently injects nothing)."""
    from ftrl_ps.cli import main

    data = tmp_path / "t.svm"
    data.write_text("1 1:1\n0 2:1\n")
    argv = [a.format(data=data) for a in command]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--straggle-workers", "1,5", "--straggle-prob", "1",
              "--straggle-delay", "0.1"])
    assert exc.value.code == 2
    assert "straggle workers 5: not a worker index of 2 worker(s) (0..1)" in (
        capsys.readouterr().err)


def test_worker_options_refuse_and_warn_before_registering(tmp_path) -> None:
    """The services' env reaches the same checks (WorkerOptions.check, before any
    contact with the servers) and warnings."""
    data = tmp_path / "t.svm"
    data.write_text("1 1:1\n")
    base = {"server": "http://127.0.0.1:9", "input": str(data), "num_workers": 1,
            "worker_index": 0}
    for bad in ({"seed": -1, "straggle_prob": 1.0, "straggle_delay": 0.01},
                {"straggle_delay": 1e12}, {"straggle_workers": "7"}):
        with pytest.raises(ConfigError):
            WorkerOptions(**base, **bad).check()
    idle = WorkerOptions(**base, straggle_delay=0.3)
    idle.check()
    assert any("no worker straggles" in w for w in idle.warnings())


def test_a_stragglers_sleeps_reach_the_tick_stats_status_and_metrics() -> None:
    """The injected sleeps travel with every clock tick, so status, the dashboard
    and /metrics show them beside the SSP waits (they were only in the worker's
    own --metrics-json); a worker without injection sends no such field."""
    import numpy as np

    from ftrl_ps.cli.status_cmd import summary
    from ftrl_ps.core.ftrl import FTRL, FTRLParams
    from ftrl_ps.ps.worker import Worker, WorkerConfig
    from tests.test_worker import MemoryServer, as_batches

    rng = np.random.default_rng(0)
    rows = 400
    labels = (rng.random(rows) < 0.3).astype(np.float32)
    indices = rng.integers(0, 60, 2 * rows).astype(np.int32)
    data = (labels, np.arange(0, 2 * rows + 1, 2), indices, np.ones(2 * rows, np.float32))
    cfg = WorkerConfig(batch_size=50, fetch_step=1, push_step=1)
    server = MemoryServer(FTRL(6).state.shape[0])
    slow = Worker(server, 6, FTRLParams(), cfg,
                  Straggler(StraggleConfig(1.0, 0.01, None, 0), 0))
    slow.train_batches(iter(as_batches(*data, per=50)))
    slow.push()
    stats = slow.stats()
    assert slow.report.straggles >= 7 and stats["straggles"] == slow.report.straggles
    assert stats["straggle_seconds"] == pytest.approx(0.01 * slow.report.straggles)
    assert "straggle_seconds" not in Worker(MemoryServer(FTRL(6).state.shape[0]), 6,
                                            FTRLParams(), cfg).stats()
    clock = {"staleness": 3, "workers": [{"worker_id": 1, "index": 0, "state": "live",
                                          "clock": 8, "seconds_since_seen": 0.1,
                                          "stats": stats}]}
    text = "\n".join(summary(0, {"shard": {"begin": 0, "end": 10}, "counters": {},
                                 "clock": clock}))
    assert f"{stats['straggle_seconds']:.1f} s slept as an injected straggler" in text
