"""Repository tools that are not part of the ftrl-ps package or its image.

* :mod:`tools.deploycheck` - check docker-compose.yml, the Dockerfile and
  deploy/k8s/*.yaml against the services' settings and each other
  (``python -m tools.deploycheck``);
* :mod:`tools.envtable` - the table of every service's ``FTRL_PS_*``
  variable in docs/deployment.md (``python -m tools.envtable --write
  docs/deployment.md``).
"""

from __future__ import annotations

__all__: list[str] = []
