"""Learn: training, evaluation, prediction and tuning in one process; the Python APIs.

* :mod:`~ftrl_ps.learn.training` -- ``train`` / ``evaluate`` / ``predict`` and
  :class:`TrainReport` (parsing in threads, progressive validation);
* :mod:`~ftrl_ps.learn.progress` -- the progress line of long runs;
* :mod:`~ftrl_ps.learn.search`, :mod:`~ftrl_ps.learn.tune` -- ``ftrl-ps tune``:
  the search over settings and passes, and the command's runner;
* :mod:`~ftrl_ps.learn.online` -- :class:`OnlineFTRL`, river-style ``learn_one``;
* :mod:`~ftrl_ps.learn.estimator` -- :class:`FTRLClassifier`, the scikit-learn
  estimator (imports scikit-learn, so nothing else imports it).

Imports :mod:`ftrl_ps.data` and :mod:`ftrl_ps.core`.
"""

__all__: list[str] = []
