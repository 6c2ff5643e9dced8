"""JIT flags for every kernel, in one place.

``cache=True`` stores compiled code next to the sources (or in
``NUMBA_CACHE_DIR``), so only the first process of a machine pays the compile.
``nogil=True`` lets kernels run in parallel threads (reader prefetch, the
lock-striped parameter store).
"""

from __future__ import annotations

from typing import Any

import numba

JIT_FLAGS: dict[str, bool] = {"nogil": True, "cache": True, "fastmath": False}


def njit(*args: Any, **kwargs: Any) -> Any:
    """``numba.njit`` with the project's flags."""
    flags = dict(JIT_FLAGS)
    flags.update(kwargs)
    if args and callable(args[0]):
        return numba.njit(**flags)(args[0])
    return numba.njit(*args, **flags)
