"""The event loop of async def handlers: uvloop when it is installed (``auto``), asyncio's on
request, and a one-line usage error when uvloop is asked for and missing or the name is wrong."""

from __future__ import annotations

import asyncio
import sys

import pytest

from leasectl.core.errors import UsageError
from leasectl.runtime.worker import WorkerConfig, new_event_loop


@pytest.mark.parametrize(
    ("choice", "name"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_the_loop_asked_for(choice: str, name: str) -> None:
    loop, got = new_event_loop(choice)
    try:
        assert got == name
        assert type(loop).__module__.partition(".")[0] == name
    finally:
        loop.close()


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # (import uvloop raises ImportError)
    loop, got = new_event_loop("auto")
    try:
        assert got == "asyncio" and isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()
    with pytest.raises(UsageError, match=r"^--event-loop uvloop: uvloop is not installed"):
        new_event_loop("uvloop")


def test_an_unknown_loop_is_refused() -> None:
    with pytest.raises(UsageError, match="--event-loop must be one of auto, uvloop, asyncio"):
        WorkerConfig(event_loop="trio")
