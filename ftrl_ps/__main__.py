"""``python -m ftrl_ps``: the ``ftrl-ps`` command line (see :mod:`ftrl_ps.cli`)."""

from ftrl_ps.cli import console_main

console_main()
