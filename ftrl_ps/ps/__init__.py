"""PS: the parameter-server protocol and both of its sides, without a web framework.

Server side (used by :mod:`ftrl_ps.server`, which only translates HTTP):

* :mod:`~ftrl_ps.ps.layout` -- keys, lock-striped groups and shard ranges;
* :mod:`~ftrl_ps.ps.store` -- the ``n``/``z`` arrays of one shard, a lock per group
  (or run of groups);
* :mod:`~ftrl_ps.ps.clock` -- the SSP clock and worker registry (shard 0);
* :mod:`~ftrl_ps.ps.dedup` -- at-most-once pushes; :mod:`~ftrl_ps.ps.state` --
  everything one shard holds; :mod:`~ftrl_ps.ps.shard_settings` -- its settings.

Wire and errors, shared by both sides:

* :mod:`~ftrl_ps.ps.wire` -- binary and JSON bodies; :mod:`~ftrl_ps.ps.validate`
  -- key/value checks; :mod:`~ftrl_ps.ps.http_status` -- the one error <-> HTTP
  status mapping; :mod:`~ftrl_ps.ps.auth` -- the bearer token.

Worker side:

* :mod:`~ftrl_ps.ps.client` (:class:`PSClient`: ``pull``/``push``/``clock``) over
  :mod:`~ftrl_ps.ps.shards` (HTTP to each shard);
* :mod:`~ftrl_ps.ps.worker` (the training loop), :mod:`~ftrl_ps.ps.workingset`
  (a round's compact keys), :mod:`~ftrl_ps.ps.merge` (how a push's deltas are
  scaled), :mod:`~ftrl_ps.ps.worker_main` and :mod:`~ftrl_ps.ps.export` (the
  worker and export processes from typed options).
"""

__all__: list[str] = []
