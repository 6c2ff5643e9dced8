"""``python -m tools.deploycheck [ROOT]``: check the repository's deployment files.

Prints every problem on stderr and their count on stdout; exit 1 if any.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Check docker-compose.yml, Dockerfile and deploy/k8s/*.yaml under ROOT."""
    import yaml

    from tools.deploycheck.compose import check_compose
    from tools.deploycheck.docker import check_dockerfile, image_user, owned_dirs
    from tools.deploycheck.k8s import check_k8s
    from tools.deploycheck.launch import ROOT

    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[0]) if args else ROOT
    dockerfile = (root / "Dockerfile").read_text()
    user, uid = image_user(dockerfile)
    problems = check_dockerfile(dockerfile, root)
    problems += check_compose(yaml.safe_load((root / "docker-compose.yml").read_text()),
                              image_dirs=owned_dirs(dockerfile), image_user=f"{user} (uid {uid})")
    docs = []
    for path in sorted((root / "deploy" / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    problems += check_k8s(docs, image_uid=uid)
    for p in problems:
        print(p, file=sys.stderr)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
