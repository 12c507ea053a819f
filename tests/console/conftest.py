"""Console tests: Pilot against real PostgreSQL, and SVG snapshots from fixed data.

A polling app is never idle, so tests wait for a condition with a deadline (``wait_until``)
instead of relying on ``pilot.pause()`` alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest
from textual.pilot import Pilot


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


async def wait_until(
    pilot: Pilot[None], condition: Callable[[], object], what: str, timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause(0.05)
