"""Write a JSON report atomically (``-`` means stdout): the ``--metrics-json`` files."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, TextIO

from ftrl_ps.core.outfile import replacing

__all__ = ["summary_stream", "write_json"]


def write_json(path: str | os.PathLike[str] | None, data: dict[str, Any]) -> None:
    """Write ``data`` as sorted, indented JSON to ``path`` (nothing if None or empty).

    ``"-"`` writes to stdout; a file is written to a temporary name beside it
    and renamed, so a reader never sees half a report. NaN and infinities (e.g.
    the log loss of no rows) are written as null: JSON has neither.

    >>> write_json("-", {"rows": 0, "logloss": float("nan")})
    {
      "logloss": null,
      "rows": 0
    }
    """
    if not path:
        return
    text = json.dumps(_finite(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        return
    with replacing(path) as f:
        f.write(text)


def summary_stream(path: str | os.PathLike[str] | None) -> TextIO:
    """Where a command prints its summary lines when its JSON report goes to ``path``:
    stderr if the report has stdout (``-``), so stdout is JSON alone; else stdout."""
    return sys.stderr if path is not None and str(path) == "-" else sys.stdout


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
