"""The model a prediction service answers with, replaced or refreshed while it serves.

:class:`ServingModel` holds one :class:`~ftrl_ps.core.ftrl.FTRL` (its dense
``n``/``z`` state; weights are derived per request exactly as
``ftrl-ps predict`` derives them, so answers match it), a version number and
where the model came from. A model source changes it in one of two ways:

* :meth:`ServingModel.install` swaps in a whole new model (a reloaded file);
* :meth:`ServingModel.apply` overwrites the state of some keys in place (a
  refresh from the cluster's changed groups).

Both take a lock that :meth:`ServingModel.predict` holds while it scores, so
a request never sees half an update. Before the first model is installed
the service is not ready: :meth:`ServingModel.current` raises
:class:`~ftrl_ps.errors.UnavailableError` (HTTP 503).

>>> import numpy as np
>>> from ftrl_ps.core.ftrl import FTRL
>>> from ftrl_ps.data.batch import Batch
>>> served = ServingModel()
>>> served.install(FTRL(bits=4), source="example")
>>> rows = Batch(np.zeros(1, np.float32), np.array([0, 1]), np.array([3], np.int32),
...              np.ones(1, np.float32))
>>> served.predict(served.current(), rows).tolist(), served.version
([0.5], 1)
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ftrl_ps.core.ftrl import FTRL
from ftrl_ps.data.batch import Batch
from ftrl_ps.errors import UnavailableError

__all__ = ["ServingModel"]


class ServingModel:
    """The served model: swapped whole or refreshed in place, read under one lock."""

    def __init__(self) -> None:
        self._model: FTRL | None = None
        self._lock = threading.Lock()
        #: increases by one with every install or applied refresh (0: no model yet)
        self.version = 0
        self.source = ""
        self.loaded_at: float | None = None  # wall time of the last change
        self.info: dict[str, Any] = {}

    @property
    def ready(self) -> bool:
        """Whether a model is installed."""
        return self._model is not None

    def current(self) -> FTRL:
        """The model to score with; UnavailableError before the first one is loaded."""
        model = self._model
        if model is None:
            raise UnavailableError("no model loaded yet; see /v1/status")
        return model

    def install(self, model: FTRL, *, source: str, **info: Any) -> None:
        """Serve ``model`` from now on (requests already scoring finish with the old one)."""
        with self._lock:
            self._model = model
            self.version += 1
            self.source = source
            self.info = dict(info)
            self.loaded_at = time.time()

    def apply(self, keys: np.ndarray, n: np.ndarray, z: np.ndarray,
              clear: tuple[int, int] | None = None) -> None:
        """Set the state of ``keys`` in place (after zeroing keys ``[clear[0], clear[1])``
        if given: a restarted shard's range); counts as a new version."""
        model = self.current()
        with self._lock:
            if clear is not None:
                model.state[clear[0]:clear[1]] = 0
            idx = np.asarray(keys, dtype=np.int64)
            model.state[idx, 0] = n
            model.state[idx, 1] = z
            self.version += 1
            self.loaded_at = time.time()

    def predict(self, model: FTRL, rows: Batch) -> np.ndarray:
        """P(y=1) of ``rows`` (slots of ``model``'s space) as float64."""
        if rows.indices.size and int(rows.indices.max()) >= model.num_slots:
            raise UnavailableError("the model changed its feature space during the request")
        with self._lock:
            return model._predict(rows.indptr, rows.indices, rows.values)

    def status(self) -> dict[str, Any]:
        """Version, source and load time for the status page."""
        model = self._model
        return {
            "ready": model is not None,
            "version": self.version,
            "source": self.source,
            "bits": model.bits if model is not None else None,
            "params": model.params.as_dict() if model is not None else None,
            "loaded_at": self.loaded_at,
            **self.info,
        }
