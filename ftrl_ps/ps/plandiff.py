"""What differs between two plans of work units (:mod:`ftrl_ps.ps.workqueue`).

Every worker of a run cuts the same input into the same units; a worker whose
plan differs from the one shard 0 holds is refused. :func:`plan_mismatch` says
how they differ, in terms of the input: a part count, the first part whose
name differs, or the first bytes of a part that differ (a part rewritten,
grown or shrunk since the plan was made).

>>> held = [{"id": 0, "part": "d/a.svm", "start": 0, "end": 9, "gzip": False},
...         {"id": 1, "part": "d/b.svm", "start": 0, "end": 5, "gzip": False}]
>>> print(plan_mismatch("p1", held, "p2", held[:1])[:72])
shard 0 hands out plan p1 (2 part(s)); this worker's input gives plan p2
>>> print(plan_mismatch("p1", held, "p3", [held[0], dict(held[1], part="e/b.svm")])[:93])
shard 0 hands out plan p1 (part 2 of 2: d/b.svm); this worker's input gives plan p3 (e/b.svm)
>>> cut = [dict(held[0], end=4), dict(held[0], id=1, start=4), dict(held[1], id=2)]
>>> print(plan_mismatch("p1", held, "p4", cut).split(": ", 2)[2][:55])
the same parts of the same sizes, cut into other units:
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["plan_mismatch"]


def _parts(units: Sequence[dict[str, Any]]) -> list[str]:
    """The part names of a plan, in order (a packed unit names several)."""
    names: list[str] = []
    for u in units:
        names += [p[0] for p in u["parts"]] if u.get("parts") else [u["part"]]
    return list(dict.fromkeys(names))


def _difference(held: Sequence[dict[str, Any]], given: Sequence[dict[str, Any]]
                ) -> tuple[str, str]:
    """How plan ``held`` and plan ``given`` differ first: each one's side."""
    a, b = _parts(held), _parts(given)
    if len(a) != len(b):
        return f"{len(a)} part(s)", f"{len(b)} part(s)"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return f"part {i + 1} of {len(a)}: {x}", y
    for (i, x, s, e), (_, y, t, f) in zip(_pieces(held), _pieces(given), strict=False):
        if (x, s, e) != (y, t, f):
            return f"unit {i}: bytes {s}-{e} of {x}", f"bytes {t}-{f} of {y}"
    return f"{len(held)} unit(s)", f"{len(given)} unit(s)"


def _pieces(units: Sequence[dict[str, Any]]) -> list[tuple[int, str, int, int]]:
    """``(unit, part, start, end)`` of every file a plan reads, in order (a packed
    unit's parts each whole)."""
    out: list[tuple[int, str, int, int]] = []
    for u in units:
        out += ([(u["id"], str(n), 0, int(size)) for n, size, _ in u["parts"]]
                if u.get("parts") else [(u["id"], u["part"], u["start"], u["end"])])
    return out


def plan_mismatch(held_id: str, held: Sequence[dict[str, Any]], plan_id: str,
                  given: Sequence[dict[str, Any]]) -> str:
    """The message refusing plan ``plan_id`` (units ``given``) of a worker while shard 0
    holds plan ``held_id`` (units ``held``), naming the first difference."""
    there, here = _difference(held, given)
    head = (f"shard 0 hands out plan {held_id} ({there}); this worker's input gives plan "
            f"{plan_id} ({here}): ")
    if _parts(held) == _parts(given) and _sizes(held) == _sizes(given):
        return head + ("the same parts of the same sizes, cut into other units: every "
                       "worker must be given the same --unit-mb")
    return head + ("the input changed since the plan was made (a part added, removed or "
                   "rewritten) or this worker reads another one. Every worker must read the "
                   "same input, at the same (absolute) paths")


def _sizes(units: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Each part's size as a plan cuts it (the end of its last piece)."""
    out: dict[str, int] = {}
    for _, part, _, end in _pieces(units):
        out[part] = max(out.get(part, 0), end)
    return out
