"""Learn: single-process training, evaluation and prediction over libsvm files.

* :mod:`~ftrl_ps.learn.training` -- ``train`` / ``evaluate`` / ``predict`` and
  :class:`TrainReport` (parsing in threads, progressive validation);
* :mod:`~ftrl_ps.learn.progress` -- the progress line of long runs.

Imports :mod:`ftrl_ps.data` and :mod:`ftrl_ps.core`.
"""

__all__: list[str] = []
