"""Write a JSON report atomically (``-`` means stdout): the ``--metrics-json`` files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["write_json"]


def write_json(path: str | os.PathLike[str] | None, data: dict[str, Any]) -> None:
    """Write ``data`` as sorted, indented JSON to ``path`` (nothing if None or empty).

    ``"-"`` writes to stdout; a file is written to a temporary name beside it
    and renamed, so a reader never sees half a report.
    """
    if not path:
        return
    if str(path) == "-":
        json.dump(data, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, target)
