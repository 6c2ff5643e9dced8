"""A small progress line for long runs: rows, rows/s, loss, percent done.

On a terminal it redraws one line (``\\r``) at most every ``interval`` seconds;
elsewhere (logs, CI) it prints a full line every ``log_interval`` seconds so
logs stay readable.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

log = logging.getLogger("ftrl_ps.progress")

__all__ = ["Progress", "human", "report_bad_lines", "report_workers_bad_lines"]


def human(n: float) -> str:
    """``1234567 -> '1.23M'``."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


class Progress:
    """Throttled progress reporting: one line redrawn on a terminal, else log lines.

    Off a terminal, each update is an INFO record of the ``ftrl_ps.progress``
    logger (time, level, component; see :mod:`ftrl_ps.learn.logs`), or a
    plain line when an explicit ``stream`` is given.
    """

    def __init__(
        self,
        label: str = "train",
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        interval: float = 0.5,
        log_interval: float = 10.0,
    ) -> None:
        self.label = label
        self._log = stream is None
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if self.tty else log_interval
        self.start = time.perf_counter()
        self._last = self.start
        self._drawn = False
        self._shown_rows = -1

    def update(
        self,
        rows: int,
        loss_sum: float | None = None,
        fraction: float | None = None,
        extra: str = "",
        force: bool = False,
        rate: float | None = None,
    ) -> None:
        """Show ``rows`` (and log loss, fraction done, ``extra``); ``rate`` is the
        rows/s to show (default: rows over the time since this object was made)."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.interval:
            return
        if force and rows == self._shown_rows and not self.tty:
            return
        self._last = now
        self._shown_rows = rows
        elapsed = max(now - self.start, 1e-9)
        shown_rate = rows / elapsed if rate is None else rate
        parts = [f"{self.label}: {human(rows)} rows", f"{human(shown_rate)} rows/s"]
        if loss_sum is not None and rows:
            parts.append(f"logloss {loss_sum / rows:.5f}")
        if fraction is not None:
            parts.append(f"{100 * min(max(fraction, 0.0), 1.0):.0f}%")
        if extra:
            parts.append(extra)
        line = "  ".join(parts)
        if self.tty:
            self.stream.write("\r\x1b[K" + line)
            self._drawn = True
        elif self._log:
            log.info("%s", line)
            return
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def report_bad_lines(count: int, examples: list[Any], stream: TextIO | None = None) -> None:
    """Say on stderr how many malformed lines were skipped and show the first ten."""
    if not count:
        return
    out = sys.stderr if stream is None else stream
    print(f"skipped {count} malformed line(s); first ones:", file=out)
    for ex in examples[:10]:  # (line number, token, reason), also as a JSON list
        if isinstance(ex, tuple | list) and len(ex) == 3:  # (line or "part:line", ...)
            where = ex[0] if isinstance(ex[0], str) else f"line {ex[0]}"
            print(f"  {where}: {ex[1]!r}: {ex[2]}", file=out)
        else:
            print(f"  {ex}", file=out)


def _where(example: Any) -> tuple[str, int]:
    """``(part, line)`` of a skipped line's example: its place in the input."""
    at = example[0] if isinstance(example, tuple | list) and example else example
    if isinstance(at, int):
        return "", at
    name, _, line = str(at).rpartition(":")
    return (name, int(line)) if line.isdigit() else (str(at), 0)


def report_workers_bad_lines(reports: list[dict[str, Any]], stream: TextIO | None = None
                             ) -> int:
    """:func:`report_bad_lines` for the workers of a cluster run (their reports'
    ``bad_lines`` and ``bad_examples``): the total, and the first ten examples of
    them all in input order (part, then line). Returns the total.

    >>> import sys
    >>> report_workers_bad_lines([{"bad_lines": 1, "bad_examples": [["d/b:7", "x", "why"]]},
    ...                           {"bad_lines": 1, "bad_examples": [["d/a:9", "2", "why"]]}],
    ...                          sys.stdout)
    skipped 2 malformed line(s); first ones:
      d/a:9: '2': why
      d/b:7: 'x': why
    2
    """
    count = sum(int(r.get("bad_lines") or 0) for r in reports)
    examples = sorted((e for r in reports for e in r.get("bad_examples") or []), key=_where)
    report_bad_lines(count, examples, stream)
    return count
