"""Consistency checks of the deployment files: compose, Dockerfile, Kubernetes.

Every container that runs ``python -m services.<name>`` is loaded the way the
service loads itself (:meth:`services._common.Service.load`: its ``FTRL_PS_*``
environment through the pydantic settings of the role's options), so a
misspelt variable, a bad value or a removed option is reported. Then the
topology is checked: shard indices, ports and the server URLs of workers and
export, tokens, worker counts, health-gated start-up, shared data volumes and
whether the image's user (uid 10001) can write its volumes.

Modules, none importing another except :mod:`~tools.deploycheck.launch`:

* :mod:`~tools.deploycheck.launch` - one container's command + env -> options;
* :mod:`~tools.deploycheck.compose` - ``docker-compose.yml``;
* :mod:`~tools.deploycheck.docker` - the ``Dockerfile``;
* :mod:`~tools.deploycheck.k8s` - ``deploy/k8s/*.yaml``;
* ``python -m tools.deploycheck [ROOT]`` runs all three on the repository.

Each ``check_*`` function returns a list of problems (empty = consistent).
"""

from __future__ import annotations

__all__: list[str] = []
