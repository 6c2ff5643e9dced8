"""Cluster: starting processes and the local cluster.

* :mod:`~ftrl_ps.cluster.launch` -- the one launcher (fork a preloaded parent, or
  exec a fresh interpreter) and its child handles;
* :mod:`~ftrl_ps.cluster.roles` / :mod:`~ftrl_ps.cluster.child` -- what a child
  runs: a role's typed options and runner;
* :mod:`~ftrl_ps.cluster.spawn` -- start shard servers and wait until they serve;
* :mod:`~ftrl_ps.cluster.local` -- ``ftrl-ps train --workers N``;
* :mod:`~ftrl_ps.cluster.settings` -- ``FTRL_PS_*`` environment settings of the
  deployable services.
"""

__all__: list[str] = []
