"""Log lines (text and JSON), the first-run compile notice, and errors without tracebacks."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

from ftrl_ps.learn import logs
from ftrl_ps.ps import kernels
from tests.conftest import run_cli

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO |WARNING|ERROR) \S+  ")


def _record(msg: str, level: int = logging.INFO, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("ftrl_ps.x", level, __file__, 1, msg, (), exc_info)


def test_formats_carry_time_level_component() -> None:
    logs.set_component("worker-3")
    try:
        text = logs.TextFormatter().format(_record("hello"))
        assert TEXT_LINE.match(text) and text.endswith("worker-3  hello"), text
        entry = json.loads(logs.JsonFormatter().format(_record("hi", logging.WARNING)))
        assert entry["level"] == "warning" and entry["component"] == "worker-3"
        assert entry["message"] == "hi" and entry["time"].endswith("Z")
        crash = logs.JsonFormatter().format(_record("crash", logging.ERROR, exc=True))
        assert "\n" not in crash and "ValueError: boom" in json.loads(crash)["exception"]
    finally:
        logs.set_component("ftrl-ps")


def test_bad_log_format_is_a_config_error() -> None:
    from ftrl_ps.errors import ConfigError

    with pytest.raises(ConfigError, match="log format"):
        logs.setup_logging("x", fmt="xml")


def test_expected_error_is_one_json_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.svm"
    bad.write_text("1 3:1\nnot-a-label 4:1\n")
    res = run_cli("train", str(bad), "--log-format", "json", "-q")
    assert res.returncode == 1
    lines = [json.loads(ln) for ln in res.stderr.strip().splitlines()]
    assert lines[-1]["level"] == "error" and lines[-1]["component"] == "train"
    assert "bad.svm:2" in lines[-1]["message"] and "exception" not in lines[-1]
    assert "Traceback" not in res.stderr


def test_text_log_lines_of_a_command(tmp_path: Path) -> None:
    res = run_cli("eval", str(tmp_path / "missing.ftrl"), str(tmp_path / "missing.svm"))
    assert res.returncode in (1, 2)
    assert "Traceback" not in res.stderr


def test_compile_notice_only_when_kernels_are_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, jit_only: None
) -> None:
    import ftrl_ps._kernels._config as config

    calls: list[int] = []
    monkeypatch.setattr(kernels, "warm_all", lambda: calls.append(1))
    caplog.set_level(logging.INFO, logger="ftrl_ps.kernels")
    monkeypatch.setattr(config, "uncached_kernels", lambda: [])
    assert kernels.load_kernels() == 0.0 and calls == [] and not caplog.records
    monkeypatch.setattr(config, "uncached_kernels", lambda: ["ftrl.train_rows"])
    assert kernels.load_kernels() >= 0.0 and calls == [1]
    messages = [r.getMessage() for r in caplog.records]
    assert any(kernels.NOTICE in m for m in messages), messages


def test_warm_all_leaves_no_kernel_uncached(jit_only: None) -> None:
    from ftrl_ps._kernels._config import uncached_kernels

    kernels.warm_all()  # compiles what is missing (from the cache: ~1 s)
    assert uncached_kernels() == []


WARM_CHECK = """
import json
import os
import sys
from ftrl_ps._kernels import ftrl as kf, parse as kp
from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.learn.training import evaluate, train
from ftrl_ps.ps.kernels import warm_training

dtype, path = sys.argv[1], sys.argv[2]
found = {"parse_chunk": kp.parse_chunk, "train_rows": kf.train_rows,
         "predict_rows": kf.predict_rows}
fresh = {name: len(d.signatures) for name, d in found.items()}
warm_training(dtype)
warm = {name: len(d.signatures) for name, d in found.items()}
model = FTRL(10, dtype=dtype)
train(model, path)
evaluate(model, path)
after = {name: len(d.signatures) for name, d in found.items()}
print(json.dumps([fresh, warm, after]))
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_warm_training_loads_what_a_training_run_calls(tmp_path: Path, dtype: str) -> None:
    """In a fresh process, warm_training loads each kernel of a single-process run
    (train, then evaluate, on a real file read by the parallel reader) with the
    argument types of that run: the run itself loads nothing more, so none of
    that loading happens after ``ftrl-ps train`` has opened its file."""
    import subprocess
    import sys

    data = tmp_path / "rows.svm"
    data.write_text("".join(f"{i % 2} {i % 7}:1.5 {100 + i}:1 u{i % 3}\n" for i in range(500)))
    from ftrl_ps._kernels.aot import AOT_ENV

    res = subprocess.run([sys.executable, "-c", WARM_CHECK, dtype, str(data)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, **{AOT_ENV: "0"}))  # numba's dispatchers

    assert res.returncode == 0, res.stderr
    fresh, warm, after = json.loads(res.stdout.strip().splitlines()[-1])
    assert fresh == {"parse_chunk": 0, "train_rows": 0, "predict_rows": 0}
    assert all(n >= 1 for n in warm.values()), warm
    assert after == warm
