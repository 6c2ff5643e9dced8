"""ftrl-ps: sparse FTRL-Proximal logistic regression, single process or parameter-server cluster.

The public face of the library; everything else is an implementation detail.

>>> import ftrl_ps
>>> model = ftrl_ps.FTRL(bits=10, params=ftrl_ps.FTRLParams(alpha=0.1, l1=1.0))
>>> model.num_slots
1024
"""

from __future__ import annotations

__version__ = "0.1.0"

from ftrl_ps.errors import (  # noqa: E402
    AuthError,
    ClockTimeoutError,
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
from ftrl_ps.ftrl import FTRL, FTRLParams  # noqa: E402
from ftrl_ps.libsvm import Batch, LibsvmReader, read_all, split_ranges  # noqa: E402
from ftrl_ps.metrics import auc, logloss  # noqa: E402
from ftrl_ps.modelio import SavedModel, load_model, save_model  # noqa: E402
from ftrl_ps.train import TrainReport, evaluate, predict, train  # noqa: E402

__all__ = [
    "AuthError",
    "Batch",
    "ClockTimeoutError",
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
