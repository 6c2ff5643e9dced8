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
                                {"delay": float("inf")}, {"workers": "0,a"}])
def test_bad_configs_are_refused(kw) -> None:
    with pytest.raises(ConfigError):
        StraggleConfig(**kw)


def test_worker_list_parsing() -> None:
    assert parse_worker_list("3, 1,3") == (1, 3)
    assert parse_worker_list(None) is None and parse_worker_list(" ") is None


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


@pytest.mark.parametrize("flags", [["--straggle-prob", "1.5"], ["--straggle-delay", "-1"],
                                   ["--straggle-workers", "0,x"]])
def test_bad_flags_exit_2(flags, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "t.svm", "--workers", "2", *flags])
    assert exc.value.code == 2
    assert "straggle" in capsys.readouterr().err
