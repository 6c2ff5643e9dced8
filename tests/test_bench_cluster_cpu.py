"""benchmarks/bench_cluster_cpu.py's per-process accounting (``--detail``): what it
reports of a process is what the process did (no test of the cluster figures)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cluster_cpu.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))  # its _harness import
    try:
        spec = importlib.util.spec_from_file_location("bench_cluster_cpu", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclass looks its module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPT.parent))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults from /proc")
def test_detail_reports_a_processs_memory_and_faults(tmp_path: Path) -> None:
    """A child that writes 64 MiB and sleeps: its peak RSS and page faults show it,
    a child that writes nothing does not."""
    bench = _module()
    touch = ("import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); "
             "time.sleep(0.3)")
    results = {}
    for name, code in (("touch", touch), ("idle", "import time; time.sleep(0.3)")):
        wall, cpu, procs, detail = bench._run(tmp_path, [sys.executable, "-c", code],
                                              tmp_path / name)
        assert wall >= 0.3 and cpu > 0 and procs.startswith("python")
        (line,) = detail.splitlines()
        fields = line.split()
        results[name] = (int(fields[fields.index("faults") + 1].replace(",", "")),
                         int(fields[fields.index("RSS") + 1].replace(",", "")))
    (touch_faults, touch_rss), (idle_faults, idle_rss) = results["touch"], results["idle"]
    assert touch_rss >= idle_rss + 60 and touch_faults >= idle_faults + 60 * 256 // 2


def test_json_has_every_run_of_every_checkout_and_mode(tmp_path: Path) -> None:
    """A tiny end-to-end run (one round, one process and a 2-worker cluster): the
    ``--json`` file holds each run's wall, CPU and test logloss, as printed."""
    import json
    import subprocess

    from tests.conftest import REPO, run_cli

    data = tmp_path / "data"
    res = run_cli("gen", str(data), "--rows", "3000", "--test-rows", "300", "--bits", "14",
                  "--quiet")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "runs.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--tree", f"here={REPO}", "--data", str(data),
         "--bits", "14", "--repeat", "1", "--no-warm-cache", "--json", str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    runs = json.loads(out.read_text())["trees"]["here"]
    assert sorted(runs) == ["cluster", "single"]
    assert json.loads(out.read_text())["rows"] == 3000  # the rows used (accept_summary's label)
    assert f"here: ftrl_ps from {REPO / 'ftrl_ps'}" in run.stdout
    for mode, (one,) in runs.items():
        assert one["wall_seconds"] > 0 and one["cpu_seconds"] > 0, mode
        assert 0 < one["test_logloss"] < 1, mode
        assert f"wall {one['wall_seconds']:5.2f} s" in run.stdout


def test_a_tree_that_is_not_a_checkout_or_a_name_given_twice_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--tree x=/nonexistent`` timed the venv's installed ftrl-ps under the name x (a
    child with PYTHONPATH=/nonexistent imports it from there); ``--tree c=A --tree c=B``
    silently dropped A."""
    from tests.conftest import REPO

    bench = _module()
    for trees, said in (([f"x={tmp_path / 'nonexistent'}"], "is not a checkout of ftrl-ps"),
                        ([f"x={tmp_path}"], "no ftrl_ps/__init__.py in it"),
                        (["x"], "expected NAME=PATH"),
                        ([f"c={REPO}", f"c={REPO}"], "the name c is given twice")):
        with pytest.raises(SystemExit) as exc:
            bench._args([arg for t in trees for arg in ("--tree", t)])
        assert exc.value.code == 2
        assert said in capsys.readouterr().err, trees
    args = bench._args(["--tree", f"a={REPO}", "--tree", f"b={REPO}"])
    assert args.tree == [("a", REPO), ("b", REPO)]  # one checkout under two names: fine


def test_a_run_imports_the_trees_ftrl_ps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A child started as the runs are (``PYTHONPATH=tree``, from a neutral folder)
    imports ``ftrl_ps`` from the tree, not from the venv's editable install; and a
    tree whose children would not is refused before any run."""
    from tests.conftest import REPO

    bench = _module()
    other = tmp_path / "other"
    (other / "ftrl_ps").mkdir(parents=True)
    (other / "ftrl_ps" / "__init__.py").write_text("")
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    assert bench._ftrl_ps_of(other, neutral) == other / "ftrl_ps" / "__init__.py"
    assert bench._ftrl_ps_of(REPO, neutral) == REPO / "ftrl_ps" / "__init__.py"
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.svm", "test.svm"):
        (data / name).write_text("1 1:1\n")
    monkeypatch.setattr(bench, "_ftrl_ps_of", lambda tree, cwd: REPO / "ftrl_ps" / "x.py")
    monkeypatch.setattr(bench, "_run", lambda *a: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--tree", f"other={other}", "--data", str(data), "--no-warm-cache"])
    assert f"imports ftrl_ps from {REPO / 'ftrl_ps' / 'x.py'}, not from the checkout" in str(
        exc.value)
