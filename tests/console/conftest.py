"""Console tests: Pilot against real PostgreSQL, and SVG snapshots from fixed data.

A polling app is never idle, so tests wait for a condition with a deadline
(``tests.util.wait_until_pilot``) instead of relying on ``pilot.pause()`` alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """Times are shown in the viewer's zone: pin it, for stable text and snapshots."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()
