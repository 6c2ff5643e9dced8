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

__all__ = ["SKIP_BLAS_PROBE"]

#: set by the command line before any kernel module is imported: numba then
#: loads without its optional BLAS support and without the scipy and yaml
#: modules it probes at import (see ``_config.skip_blas_probe`` and
#: ``_config._light_numba_import``)
SKIP_BLAS_PROBE = False
