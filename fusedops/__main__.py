"""``python -m fusedops``: the console script."""

import sys

from .cli import main

sys.exit(main())
