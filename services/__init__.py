"""Deployable entry points of ftrl-ps, configured by environment variables.

Each module runs one ``ftrl-ps`` sub-command with its flags taken from
``FTRL_PS_<FLAG_UPPER_SNAKE>`` variables, so a container needs no shell
wrapper::

    FTRL_PS_PORT=7000 FTRL_PS_NUM_SHARDS=2 python -m services.server

=================  ===================  =======================================
module             runs                 notes
=================  ===================  =======================================
services.gen       ``ftrl-ps gen``      ``FTRL_PS_SKIP_IF_EXISTS`` keeps data
services.server    ``ftrl-ps server``   binds 0.0.0.0:7000 unless told
                                        otherwise; shard index from the
                                        StatefulSet ordinal in Kubernetes
services.worker    ``ftrl-ps worker``   worker index from
                                        ``JOB_COMPLETION_INDEX`` when unset
services.export    ``ftrl-ps export``
=================  ===================  =======================================

The mapping is derived from the real argument parser
(:func:`ftrl_ps.cli.build_parser`) by :mod:`services.env`;
``python -m services.env --markdown`` prints the table of every variable.
"""

from __future__ import annotations

#: service modules in the order a run uses them
SERVICE_MODULES: tuple[str, ...] = ("gen", "server", "worker", "export")

__all__ = ["SERVICE_MODULES"]
