"""Data: reading, hashing and batching libsvm input, and generating synthetic data.

* :mod:`~ftrl_ps.data.libsvm` -- the streaming reader (chunks, ``.gz``, stdin,
  byte ranges for workers);
* :mod:`~ftrl_ps.data.hashing` -- feature names to slots (one hash, in
  :mod:`ftrl_ps._kernels.mix`);
* :mod:`~ftrl_ps.data.batch`, :mod:`~ftrl_ps.data.minibatch` -- CSR batches and
  their slicing; :mod:`~ftrl_ps.data.prefetch` -- parse ahead in a thread;
* :mod:`~ftrl_ps.data.features` -- dicts, sparse and dense matrices to the rows
  the reader makes from the same examples;
* :mod:`~ftrl_ps.data.synth`, :mod:`~ftrl_ps.data.gen` -- the seeded synthetic
  CTR generator with a known true model.

Imports only :mod:`ftrl_ps.core` (and the kernels).
"""

__all__: list[str] = []
