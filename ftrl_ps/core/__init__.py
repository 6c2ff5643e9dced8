"""Core: the FTRL-Proximal math and the model, with no I/O of data, HTTP or threads.

* :mod:`~ftrl_ps.core.params` -- hyper-parameters (:class:`FTRLParams`), the one
  ``bits`` validator, key counts;
* :mod:`~ftrl_ps.core.ftrl` -- the :class:`FTRL` model, a checked wrapper over the
  numba kernels in :mod:`ftrl_ps._kernels.ftrl`;
* :mod:`~ftrl_ps.core.multi` -- K models trained side by side (``ftrl-ps tune``),
  a checked wrapper over :mod:`ftrl_ps._kernels.tune`;
* :mod:`~ftrl_ps.core.metrics` -- log loss, AUC, a streaming accumulator;
* :mod:`~ftrl_ps.core.modelio` -- the model file (atomic, checksummed);
* :mod:`~ftrl_ps.core.jsonfile` -- atomic JSON reports.

The lowest layer: it imports nothing from the other packages of ftrl_ps.
"""

__all__: list[str] = []
