"""Shared helpers of the benchmarks: cached synthetic data, measured child
processes (wall time and peak RSS), Vowpal Wabbit plumbing, metrics, tables.

Not part of the ``ftrl_ps`` package; the benchmark scripts import it as a
sibling module.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ftrl_ps.core import metrics
from ftrl_ps.data.synth import SynthConfig, generate

#: default cache of generated data (git-ignored: ``benchmarks/.data/``)
DEFAULT_DATA_DIR = Path(__file__).resolve().parent / ".data"
#: the workplace's real data sets (absent in a user's clone: benchmarks skip them);
#: $BENCH_SHARED_DATA points elsewhere (a worktree outside the workplace's folder)
SHARED_DATA = Path(os.environ.get("BENCH_SHARED_DATA")
                   or Path(__file__).resolve().parents[2] / "shared" / "data")
#: name -> (train, test) below SHARED_DATA
REAL_PAIRS = {
    "a9a": ("libsvm/a9a", "libsvm/a9a.t"),
    "agaricus": ("libsvm/agaricus_train.txt", "libsvm/agaricus_test.txt"),
    "ipinyou": ("ipinyou/train.fm.txt", "ipinyou/test.fm.txt"),
    "rcv1_small": ("rcv1/rcv1_small.dat", "rcv1/rcv1_small_test.data"),
}

#: runs Vowpal Wabbit's C++ driver from the pip package: the package ships no
#: ``vw`` binary, but ``Workspace`` runs the command-line parser itself when
#: given ``-d`` (``pyvw.Workspace.__init__`` calls ``run_parser``), and
#: ``finish()`` writes the model (``-f``) and the predictions (``-p``).
#: runs VW's own C++ driver (parse + train + model write) and prints the time
#: of that phase alone, after the interpreter and the vowpalwabbit import
class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout without breaking a line inside a word (hyphenated or long), so an
    example such as ``--train-args=--adaptive-rounds`` is printed whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False,
                             break_long_words=False)


def comma_list(what: str, *, choices: Sequence[str] = (),
               check: Callable[[str], object] | None = None) -> Callable[[str], list[str]]:
    """An argparse ``type``: a comma-separated list whose every item is one of
    ``choices`` (when given) and passes ``check`` (a function that raises
    ValueError or ArgumentTypeError), so a typo is a usage error (exit 2) before
    any run, not a traceback after the first ones.

    >>> comma_list("staleness values", check=staleness)("0, 3,inf")
    ['0', '3', 'inf']
    >>> comma_list("splits", choices=("shares", "units"))("units,bogus")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: unknown splits: bogus (choose from shares, units)
    """
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
        unknown = [t for t in items if choices and t not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(choices)})")
        for t in items:
            if check is not None:
                try:
                    check(t)
                except (ValueError, argparse.ArgumentTypeError) as exc:
                    raise argparse.ArgumentTypeError(f"bad {what} {t!r}: {exc}") from None
        return items

    return parse


def staleness(text: str) -> str:
    """One ``ftrl-ps train --staleness`` value: an integer >= 0 or ``inf``."""
    if text.lower() != "inf" and not text.isdigit():
        raise ValueError("expected an integer >= 0 or inf")
    return text


def positive(text: str) -> int:
    """A positive integer (e.g. a number of workers)."""
    if not (text.isdigit() and int(text) >= 1):
        raise ValueError("expected a positive integer")
    return int(text)


def _number(text: str, kind: type, low: float, strict: bool, what: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1 (``--repeat``, ``--workers``, ``--rows``),
    so 0 or -1 is a usage error (exit 2) before any run.

    >>> positive_int("3")
    3
    >>> positive_int("0")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer >= 1, got '0'
    """
    return int(_number(text, int, 1, False, "an integer >= 1"))


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer >= 0."""
    return int(_number(text, int, 0, False, "an integer >= 0"))


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (e.g. generated rows, whose quarter
    is the test set: at least 4)."""
    def parse(text: str) -> int:
        return int(_number(text, int, low, False, f"an integer >= {low}"))

    parse.__name__ = f"int_at_least_{low}"
    return parse


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (a period in seconds)."""
    return float(_number(text, float, 0.0, True, "a number > 0"))


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a finite number >= 0 (``--warm-memory`` GiB)."""
    return float(_number(text, float, 0.0, False, "a number >= 0"))


def staleness_arg(text: str) -> str:
    """An argparse ``type``: one ``ftrl-ps train --staleness`` value (see :func:`staleness`)."""
    try:
        return staleness(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def train_flags(*, reserved: Sequence[str] = ()) -> Callable[[str], list[str]]:
    """An argparse ``type``: more flags for ``ftrl-ps train`` in one string (shell
    quoting), checked up front by ``ftrl-ps train``'s own parser: a flag it does not
    know or a bad value is a usage error before any run, and so is any of
    ``reserved`` (``ftrl-ps train`` option names, e.g. ``--workers``: what the
    benchmark sets itself, so a later one on the command line would silently
    override it), in any spelling ``ftrl-ps train`` takes (``--workers=0``, an
    abbreviation).
    """
    def parse(text: str) -> list[str]:
        try:
            flags = shlex.split(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        problem = train_flags_problem(flags, reserved)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return flags

    return parse


def reserved_given(flags: Sequence[str], reserved: Sequence[str]) -> list[str]:
    """The ``reserved`` options that ``flags`` set, as ``--workers 0``, ``--workers=0`` or
    an abbreviation (``--work``), without any parser: for flags meant for another
    checkout's ``ftrl-ps train``, which this one's parser may not know.

    >>> reserved_given(["--batch-size", "10", "--work=0", "--worker-timeout", "5"],
    ...                ["--workers", "--staleness"])
    ['--workers']
    """
    given = []
    for token in flags:
        name = token.split("=", 1)[0]
        if name.startswith("--") and len(name) > 3:
            given += [r for r in reserved if r.startswith(name) and r not in given]
    return given


def train_flags_problem(flags: Sequence[str], reserved: Sequence[str] = ()) -> str | None:
    """Why ``flags`` cannot be added to an ``ftrl-ps train`` command (see
    :func:`train_flags`), or None."""
    import contextlib
    import io

    from ftrl_ps.cli import build_parser

    argv = ["train", "TRAIN", *flags]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = build_parser("train").parse_args(argv)
            train = args._parser  # the sub-parser: each option's dest
            dests = {a.dest: a.option_strings[0] for a in train._actions
                     if set(a.option_strings) & set(reserved)}
            unset = object()
            train.set_defaults(**dict.fromkeys(dests, unset))
            again = train.parse_args(argv[1:])
    except SystemExit:
        said = (err.getvalue().strip().splitlines() or [" ".join(flags)])[-1]
        said = re.sub(r" \(see '[^']*'\)$", "", re.sub(r"^ftrl-ps( train)?: error: ", "", said))
        return f"not for ftrl-ps train: {said}"
    given = [flag for dest, flag in dests.items() if getattr(again, dest) is not unset]
    if given:
        return f"{', '.join(given)} is set by this benchmark (not in these flags)"
    return None


def require_vw() -> None:
    """Exit at once, saying how to get it, when Vowpal Wabbit (the benchmarks'
    reference) is not installed: not after the data and the ftrl-ps side."""
    import importlib.util

    if importlib.util.find_spec("vowpalwabbit") is None:
        raise SystemExit("this benchmark runs Vowpal Wabbit beside ftrl-ps, and the "
                         "'vowpalwabbit' package is not installed: bash scripts/setup.sh "
                         "dev,bench (or pip install vowpalwabbit)")


VW_DRIVER = (
    "import sys, time; from vowpalwabbit import Workspace; t = time.perf_counter(); "
    "Workspace(arg_list=sys.argv[1:]).finish(); "
    "print(f'phase_seconds {time.perf_counter() - t!r}', file=sys.stderr)"
)


def phase_seconds(stderr: Path) -> float:
    """The ``phase_seconds`` line VW_DRIVER prints."""
    for line in stderr.read_text(errors="replace").splitlines():
        if line.startswith("phase_seconds "):
            return float(line.split()[1])
    raise RuntimeError(f"no phase_seconds line in {stderr}")

_metrics_checked = False


@dataclass(frozen=True)
class Measured:
    """A finished child process: exit code, wall seconds, peak RSS, log files, and CPU
    seconds (user + system, of the command and the children it waited for)."""

    returncode: int
    wall_seconds: float
    max_rss_mib: float
    stdout: Path
    stderr: Path
    cpu_seconds: float = float("nan")

    def tail(self, lines: int = 15) -> str:
        text = self.stderr.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


#: tiny launcher (``python -S``, about 8 MiB) that spawns the measured command and
#: reports its wall time, ``ru_maxrss`` (KiB) and exit code. Needed because
#: Linux charges a child's ``ru_maxrss`` with the RSS of the process it was
#: forked from (the old mm's high-water mark is kept at exec): a child spawned
#: straight from this benchmark (numpy, numba loaded) would never report less
#: than the benchmark's own ~100 MiB.
_LAUNCHER = (
    "import os, sys, time\n"
    "start = time.perf_counter()\n"
    "pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "wall = time.perf_counter() - start\n"
    "with open(sys.argv[1], 'w') as fh:\n"
    "    fh.write(f'{wall!r} {usage.ru_maxrss} {os.waitstatus_to_exitcode(status)} '\n"
    "             f'{usage.ru_utime + usage.ru_stime!r}')\n"
)


def run_measured(cmd: Sequence[str], log_prefix: Path) -> Measured:
    """Run ``cmd``; measure wall time (start to exit) and the child's peak RSS.

    The command is started by a small launcher process (see ``_LAUNCHER``)
    that times it and reads its peak RSS from ``os.wait4``'s rusage
    (``ru_maxrss``, KiB on Linux), so the RSS covers the command itself, not
    its children, and has a floor of about 8 MiB. Output goes to
    ``log_prefix.out`` / ``log_prefix.err`` (files, so no pipe can fill up).
    """
    out, err = log_prefix.with_suffix(".out"), log_prefix.with_suffix(".err")
    report = log_prefix.with_suffix(".rusage")
    with open(out, "wb") as fo, open(err, "wb") as fe:
        subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, str(report), *cmd],
                       stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, check=True)
    wall, max_rss_kib, returncode, cpu = report.read_text().split()
    return Measured(int(returncode), float(wall), int(max_rss_kib) / 1024.0, out, err,
                    float(cpu))


def _check_against_sklearn() -> None:
    """Assert once that the metric code agrees with scikit-learn (ties included)."""
    global _metrics_checked
    if _metrics_checked:
        return
    from sklearn.metrics import log_loss, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 2000)
    p = np.clip(rng.integers(0, 50, 2000) / 50.0 + 0.3 * y, 0.001, 0.999)  # many ties
    assert abs(metrics.auc(y, p) - roc_auc_score(y, p)) < 1e-12, "AUC disagrees with sklearn"
    assert abs(metrics.logloss(y, p) - log_loss(y, p)) < 1e-12, "logloss disagrees with sklearn"
    _metrics_checked = True


def logloss(labels: np.ndarray, probs: np.ndarray) -> float:
    """Mean cross-entropy: the same code ftrl-ps uses (:func:`ftrl_ps.core.metrics.logloss`)."""
    _check_against_sklearn()
    return metrics.logloss(labels, probs)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Rank-based ROC AUC with average ranks for ties (:func:`ftrl_ps.core.metrics.auc`)."""
    _check_against_sklearn()
    return metrics.auc(labels, scores)


def warm_page_cache(path: Path, chunk: int = 64 << 20) -> tuple[float, int]:
    """Read ``path`` once, so that a timed run reads it from the page cache, not the
    disk; (seconds, bytes). A cached file reads at ~10 GB/s (a 7 GB file in ~0.6 s).

    Measured here: the kernel evicts a big file's pages it has not touched for a
    while (DAMON reclaim runs on this host), so the first of several 20M-row runs
    read ~4 of its 7 GB from the disk: 17.7-17.9 s against 6.9-8.4 s, and its last
    tenth (the part not cached) at 0.57x the first (RESULTS.md, session 20).
    """
    buf = bytearray(chunk)
    total, start = 0, time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return time.perf_counter() - start, total


def count_rows(path: Path, chunk: int = 64 << 20) -> int:
    """Lines of a text file (its rows: a last line without a newline counts too)."""
    total, last = 0, b"\n"
    with open(path, "rb", buffering=0) as f:
        while block := f.read(chunk):
            total += block.count(b"\n")
            last = block[-1:]
    return total + (last != b"\n")


def warm_memory(gib: float) -> float:
    """Fault in ``gib`` GiB of fresh memory and free it at once; the seconds it took.

    This host is a VM whose free memory goes back to the hypervisor (free page
    reporting, ~2 s after it is freed): the first write to such a page costs the
    host a fault, ~3 ms per MiB here (1.5 GiB in 4.8-5.0 s, against 0.3 s for
    512 MiB that had just been freed). A run started right after this finds
    backed memory; a run started after the machine idled pays that price for
    every MiB it touches first, in its first tenth: one process at 20M rows,
    ``--bits 26`` (a 512 MiB model), last/first tenth 2.56-2.75 cold, 1.14-1.23
    after 1.5 GiB warmed (RESULTS.md, session 22). It is the machine's cost,
    not the program's, so ``bench_scale.py --warm-memory`` can take it out; its
    runs without the option keep it.
    """
    start = time.perf_counter()
    if gib > 0:
        block = np.ones(int(gib * (1 << 30)) // 8)  # written: every page faulted in
        del block  # unmapped: free, and still backed, for a while
    return time.perf_counter() - start


def ensure_synth_data(data_dir: Path, rows: int, test_rows: int, bits: int, seed: int = 0
                      ) -> tuple[Path, dict[str, Any], float | None]:
    """Generate (once) a synthetic set with :func:`ftrl_ps.data.synth.generate`;
    reuse a cached copy.

    Returns the folder, the parsed ``truth.json`` and the generator's wall
    seconds (``None`` when the cache was used). ``truth.json`` is written last,
    so its presence marks a complete data set.
    """
    folder = data_dir / f"synth_r{rows}_t{test_rows}_b{bits}_s{seed}"
    truth_path = folder / "truth.json"
    if truth_path.exists() and (folder / "train.svm").exists() and (folder / "test.svm").exists():
        truth = json.loads(truth_path.read_text())
        config = truth.get("config", {})
        if (config.get("rows"), config.get("test_rows"), config.get("bits"),
                config.get("seed")) == (rows, test_rows, bits, seed):
            return folder, truth, None
    config = SynthConfig(rows=rows, test_rows=test_rows, seed=seed, bits=bits)
    truth = generate(folder, config, progress=sys.stderr)
    return folder, json.loads(truth_path.read_text()), float(truth["seconds"])


def libsvm_to_vw(src: Path, dst: Path) -> Path:
    """Write ``src`` (libsvm, labels 0/1 or -1/+1) as VW text ``±1 |f idx:val ...``, once."""
    if dst.exists():
        return dst
    part = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fi, open(part, "wb") as fo:
        for line in fi:
            label, _, rest = line.partition(b" ")
            positive = float(label) > 0
            fo.write((b"1 |f " if positive else b"-1 |f ") + (rest if rest else b"\n"))
    os.replace(part, dst)
    return dst


def head_lines(src: Path, dst: Path, n: int) -> Path:
    """Write the first ``n`` lines of ``src`` to ``dst`` (once)."""
    if not dst.exists():
        with open(src, "rb") as fi, open(dst, "wb") as fo:
            for i, line in enumerate(fi):
                if i >= n:
                    break
                fo.write(line)
    return dst


def read_labels(path: Path) -> np.ndarray:
    """0/1 labels from the first token of every line of a libsvm or VW file."""
    with open(path, "rb") as fh:
        return np.array([float(line.split(b" ", 1)[0]) > 0 for line in fh], dtype=np.int8)


def read_predictions(path: Path) -> np.ndarray:
    """One float per line (VW ``-p`` output; a trailing tag, if any, is ignored)."""
    with open(path, "rb") as fh:
        return np.array([float(line.split()[0]) for line in fh if line.strip()])


def vw_progressive_loss(stderr: Path) -> float:
    """The ``average loss`` VW prints at the end of a training pass (NaN if absent)."""
    found = re.findall(r"average loss = ([-+0-9.eEnaif]+)", stderr.read_text(errors="replace"))
    return float(found[-1]) if found else float("nan")


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]], text: int = 1) -> str:
    """Plain-text table; floats are shown as given (format them before). The first
    ``text`` columns are aligned left (words), the others right (numbers)."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i >= text else c.ljust(w) for i, (c, w) in enumerate(
        zip(row, widths, strict=True))).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
