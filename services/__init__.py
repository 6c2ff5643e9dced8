"""Deployable entry points of ftrl-ps, configured by environment variables.

Each module runs one role (the same runner as the matching ``ftrl-ps``
sub-command) with its options read from ``FTRL_PS_<FIELD_UPPER_SNAKE>``
variables by :func:`ftrl_ps.cluster.settings.load_options`, so a container
needs no shell wrapper::

    FTRL_PS_PORT=7000 FTRL_PS_NUM_SHARDS=2 python -m services.server

=================  ===================  =======================================
module             runs                 notes
=================  ===================  =======================================
services.gen       ``ftrl-ps gen``      ``FTRL_PS_SKIP_IF_EXISTS`` keeps data
services.server    ``ftrl-ps server``   binds 0.0.0.0:7000 unless told
                                        otherwise; shard index from the
                                        StatefulSet ordinal in Kubernetes
services.worker    ``ftrl-ps worker``   worker index from
                                        ``JOB_COMPLETION_INDEX`` when unset;
                                        waits for the servers and its input
services.export    ``ftrl-ps export``   waits for the servers, its test file
                                        and every configured worker
services.serve     ``ftrl-ps serve``    binds 0.0.0.0:8000 unless told
                                        otherwise; predictions and online
                                        learning
services.wait      (a separate step)    waits for /health and the files
=================  ===================  =======================================

The checks of the deployment files and the table of every variable live in
the top-level ``tools`` package (``python -m tools.deploycheck``,
``python -m tools.envtable --markdown``).
"""

from __future__ import annotations

from ftrl_ps._kernels import one_blas_thread
from ftrl_ps.core.memory import keep_freed_chunks  # imports no numpy

# every service runs as ``python -m services.NAME``, which imports this package
# first: numpy (imported by the service's modules) then starts one BLAS thread
# instead of one per core, each spinning ~0.1 s (ftrl_ps._kernels.one_blas_thread)
one_blas_thread()
# ... and a reader's chunk arrays are reused from the heap, not faulted in anew for each
# chunk (ftrl_ps.core.memory.keep_freed_chunks; a shard sets its own, server.run)
keep_freed_chunks()

#: service modules in the order a run uses them
SERVICE_MODULES: tuple[str, ...] = ("gen", "server", "worker", "export", "serve")

__all__ = ["SERVICE_MODULES"]
