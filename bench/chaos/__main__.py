"""``python -m bench.chaos``: the chaos soak (``bench/chaos/__init__.py`` says what it does)."""

import sys

from bench.chaos.cli import main

sys.exit(main())
