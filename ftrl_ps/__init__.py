"""ftrl-ps: sparse FTRL-Proximal logistic regression, single process or parameter-server cluster.

The public face of the library: single-process training (FTRL, FTRLParams,
LibsvmReader, train/evaluate/predict, load_model/save_model), the Python APIs
(FTRLClassifier, a scikit-learn estimator; OnlineFTRL, river-style), the cluster's
pieces (PSClient, Worker, ParameterStore, SSPClock, Layout, create_app and the
options/runners of each process) and the error tree. The layers behind them are
described in docs/architecture.md.

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
    UnavailableError,
    UnknownWorkerError,
    WorkerStateError,
)

#: names loaded on first use: many need numba (~0.4 s to import) or FastAPI,
#: and the command line, the launcher and the servers must start without them
_LAZY = {
    "Layout": "ftrl_ps.ps.layout",
    "LocalClusterOptions": "ftrl_ps.cluster.local",
    "PSClient": "ftrl_ps.ps.client",
    "ParameterStore": "ftrl_ps.ps.store",
    "SSPClock": "ftrl_ps.ps.clock",
    "ServeOptions": "ftrl_ps.server.serve_options",
    "ServerSettings": "ftrl_ps.ps.shard_settings",
    "ShardOptions": "ftrl_ps.server.options",
    "Worker": "ftrl_ps.ps.worker",
    "WorkerConfig": "ftrl_ps.ps.worker",
    "WorkerOptions": "ftrl_ps.ps.worker_main",
    "create_app": "ftrl_ps.server.app",
    "run_cluster": "ftrl_ps.cluster.local",
    "run_serve": "ftrl_ps.server.serve_options",
    "run_shard": "ftrl_ps.server.run",
    "run_worker": "ftrl_ps.ps.worker_main",
    "FTRL": "ftrl_ps.core.ftrl",
    # numpy's import starts OpenBLAS's threads: the command line first makes it one
    # (ftrl_ps._kernels.one_blas_thread), so importing this package imports no numpy
    "FTRLParams": "ftrl_ps.core.params",
    # needs scikit-learn (the "sklearn" extra); imported only when asked for
    "FTRLClassifier": "ftrl_ps.learn.estimator",
    "OnlineFTRL": "ftrl_ps.learn.online",
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

    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name in ("sklearn", "scipy"):
            raise ImportError(
                f"ftrl_ps.{name} needs scikit-learn: pip install 'ftrl-ps[sklearn]'"
            ) from exc
        raise
    value = getattr(imported, name)
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
    "FTRLClassifier",
    "FTRLPSError",
    "FTRLParams",
    "Layout",
    "LayoutMismatchError",
    "LibsvmReader",
    "LocalClusterOptions",
    "ModelFormatError",
    "OnlineFTRL",
    "PSClient",
    "ParameterStore",
    "ParseError",
    "PayloadTooLargeError",
    "ProtocolError",
    "SSPClock",
    "SavedModel",
    "ServeOptions",
    "ServerError",
    "ServerSettings",
    "ShardOptions",
    "TrainReport",
    "TransportError",
    "UnavailableError",
    "UnknownWorkerError",
    "Worker",
    "WorkerConfig",
    "WorkerOptions",
    "WorkerStateError",
    "__version__",
    "auc",
    "create_app",
    "evaluate",
    "load_model",
    "logloss",
    "predict",
    "read_all",
    "run_cluster",
    "run_serve",
    "run_shard",
    "run_worker",
    "save_model",
    "split_ranges",
    "train",
]
