"""`python -m leasectl`."""

from __future__ import annotations

from leasectl.cli import main

raise SystemExit(main())
