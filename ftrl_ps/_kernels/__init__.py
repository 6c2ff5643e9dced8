"""Private numba kernels. Call them only through the checked wrappers that
validate their inputs first (the kernels assume valid inputs):

* ``ftrl`` -- training, prediction, weights: :mod:`ftrl_ps.core.ftrl`;
* ``parse`` and ``mix`` -- the libsvm parser and the one feature hash:
  :mod:`ftrl_ps.data.libsvm`, :mod:`ftrl_ps.data.hashing`;
* ``synth`` -- formatting generated rows: :mod:`ftrl_ps.data.synth`;
* ``worker`` -- numbering a round's keys: :mod:`ftrl_ps.ps.workingset`;
* ``tune`` -- K models over the same rows: :mod:`ftrl_ps.core.multi`.

The parameter store uses numpy only. JIT flags live in ``_config``.
"""

import os
from collections.abc import MutableMapping

__all__ = ["BLAS_THREAD_VARIABLES", "SKIP_BLAS_PROBE", "one_blas_thread"]

#: set by the command line before any kernel module is imported: numba then
#: loads without its optional BLAS support and without the scipy and yaml
#: modules it probes at import (see ``_config.skip_blas_probe`` and
#: ``_config._light_numba_import``)
SKIP_BLAS_PROBE = False

#: what OpenBLAS reads for its thread count, in its order of precedence
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set ``OPENBLAS_NUM_THREADS=1`` unless one of :data:`BLAS_THREAD_VARIABLES` is
    set; True if it was set here. Effective only before numpy is imported.

    numpy's OpenBLAS starts a thread per core when numpy is imported, and each
    of them spins for ~0.1 s waiting for work before it sleeps: 0.12 CPU s of
    every process that imports numpy on this 2-core machine (``import numpy``:
    0.17 s user time, 0.05 s with one thread), taken from the training's
    threads at the start of a run (one process, 1M rows: 0.68-0.75 -> 0.55-0.60
    CPU s). No ftrl-ps code calls BLAS, so the command line and the services
    ask for one thread; a user's own setting wins, and a library user's
    process is left alone.
    """
    if any(environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return False
    environ["OPENBLAS_NUM_THREADS"] = "1"
    return True
