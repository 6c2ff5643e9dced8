import sys

from ftrl_ps.cli import main

sys.exit(main())
