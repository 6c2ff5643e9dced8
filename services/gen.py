"""``python -m services.gen``: write a synthetic data set, configured by env.

With ``FTRL_PS_SKIP_IF_EXISTS=PATH`` nothing is generated when PATH already
exists (the configuration is still checked), so a compose file can run this
service every time and a user who mounts a folder with their own data keeps
it untouched.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from ftrl_ps.data.gen import GenOptions, run_gen
from ftrl_ps.errors import ConfigError
from services._common import Service

__all__ = ["SERVICE", "SKIP_ENV", "main"]

SKIP_ENV = "FTRL_PS_SKIP_IF_EXISTS"

SERVICE = Service(
    name="gen",
    command="gen",
    options=GenOptions,
    runner=run_gen,
    extras={
        SKIP_ENV: "if this path exists, generate nothing and exit 0 (keeps your own data "
        "in a mounted folder)"
    },
)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Generate the data set unless ``FTRL_PS_SKIP_IF_EXISTS`` names an existing path."""
    env = os.environ if environ is None else environ
    args = sys.argv[1:] if argv is None else argv
    skip = env.get(SKIP_ENV, "")
    if skip and os.path.exists(skip):
        try:
            SERVICE.load(args, env)  # still reject typos
        except ConfigError as exc:
            SERVICE.error(exc)
            return 2
        print(f"services.gen: {skip} exists, nothing generated", file=sys.stderr)
        return 0
    return SERVICE.main(args, env)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
