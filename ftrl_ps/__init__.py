"""ftrl-ps: sparse FTRL-Proximal logistic regression, single process or parameter-server cluster.

The public face of the library; everything else is an implementation detail.

>>> import ftrl_ps
>>> model = ftrl_ps.FTRL(bits=10, params=ftrl_ps.FTRLParams(alpha=0.1, l1=1.0))
>>> model.num_slots
1024
"""

from __future__ import annotations

__version__ = "0.1.0"

from ftrl_ps.core.params import FTRLParams  # noqa: E402
from ftrl_ps.errors import (  # noqa: E402
    AuthError,
    ClockTimeoutError,
    ClusterError,
    ConfigError,
    DataError,
    FTRLPSError,
    LayoutMismatchError,
    ModelFormatError,
    ParseError,
    PayloadTooLargeError,
    ProtocolError,
    ServerError,
    TransportError,
    UnknownWorkerError,
    WorkerStateError,
)

#: names loaded on first use: they need numba, which takes ~0.4 s to import,
#: and the command line / cluster launcher must be able to start without it
_LAZY = {
    "FTRL": "ftrl_ps.core.ftrl",
    "Batch": "ftrl_ps.data.batch",
    "LibsvmReader": "ftrl_ps.data.libsvm",
    "read_all": "ftrl_ps.data.libsvm",
    "split_ranges": "ftrl_ps.data.libsvm",
    "auc": "ftrl_ps.core.metrics",
    "logloss": "ftrl_ps.core.metrics",
    "SavedModel": "ftrl_ps.core.modelio",
    "load_model": "ftrl_ps.core.modelio",
    "save_model": "ftrl_ps.core.modelio",
    "TrainReport": "ftrl_ps.learn.training",
    "evaluate": "ftrl_ps.learn.training",
    "predict": "ftrl_ps.learn.training",
    "train": "ftrl_ps.learn.training",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ftrl_ps' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AuthError",
    "Batch",
    "ClockTimeoutError",
    "ClusterError",
    "ConfigError",
    "DataError",
    "FTRL",
    "FTRLPSError",
    "FTRLParams",
    "LayoutMismatchError",
    "LibsvmReader",
    "ModelFormatError",
    "ParseError",
    "PayloadTooLargeError",
    "ProtocolError",
    "SavedModel",
    "ServerError",
    "TrainReport",
    "TransportError",
    "UnknownWorkerError",
    "WorkerStateError",
    "__version__",
    "auc",
    "evaluate",
    "load_model",
    "logloss",
    "predict",
    "read_all",
    "save_model",
    "split_ranges",
    "train",
]
