"""The handler API: what a handler gets (``JobContext``, ``AsyncJobContext``) and may raise
(``PermanentError``); ``leasectl/__init__.py`` re-exports them for handler modules."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import threading
from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn

from leasectl.core.config import MAX_PROGRESS_CHARS, MAX_SNOOZE_DELAY
from leasectl.core.models import Job, Lease


class PermanentError(Exception):
    """Raise from a handler to fail the job at once, without further retries."""


# Recorded errors name the class as handlers import it (leasectl.PermanentError).
PermanentError.__module__ = "leasectl"


class Snooze(Exception):
    """Raise from a handler (or call ``ctx.snooze(delay)``) to put the job off: ``Pending``
    again ``delay`` from now (a ``timedelta`` or seconds, 0 to 7 days), without spending an
    attempt. A job snoozes at most ``MAX_SNOOZES`` (100) times; one more fails the attempt."""

    def __init__(self, delay: timedelta | float) -> None:
        self.delay = snooze_delay(delay)
        super().__init__(f"snoozed for {self.delay.total_seconds():g}s")


Snooze.__module__ = "leasectl"


class JobTimedOut(Exception):
    """The attempt's error when its handler ran past the job's timeout (``enqueue --timeout``)."""


JobTimedOut.__module__ = "leasectl"


def snooze_delay(delay: object) -> timedelta:
    """A snooze's delay checked: a timedelta or a number of seconds, from 0 to 7 days."""
    if isinstance(delay, bool) or not isinstance(delay, timedelta | int | float):
        raise TypeError(f"a snooze's delay is a timedelta or seconds, got {type(delay).__name__}")
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if not 0 <= seconds <= MAX_SNOOZE_DELAY.total_seconds():  # (NaN too)
        raise ValueError(
            f"a snooze's delay must be between 0 and {MAX_SNOOZE_DELAY.days} days, got {delay!r}"
        )
    return delay if isinstance(delay, timedelta) else timedelta(seconds=seconds)


def progress_value(fraction: object, message: object) -> tuple[float, str | None]:
    """``ctx.progress``'s arguments checked: a fraction from 0 to 1 and a message (or None),
    the message cut to MAX_PROGRESS_CHARS characters, NUL characters dropped."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress is a number from 0 to 1, got {type(fraction).__name__}")
    if not 0.0 <= fraction <= 1.0:  # (NaN too)
        raise ValueError(f"progress is a number from 0 to 1, got {fraction!r}")
    if message is not None:
        if not isinstance(message, str):
            raise TypeError(f"a progress message is a string, got {type(message).__name__}")
        message = message.replace("\x00", "")[:MAX_PROGRESS_CHARS]
        # (A lone surrogate cannot be sent: replaced, not refused.)
        message = message.encode("utf-8", "replace").decode("utf-8")
    return float(fraction), message


class UnusableJob(PermanentError):
    """A job whose stored values the worker cannot load (``Lease.unusable``): failed at once,
    without calling the handler; its message is the job's last error, as is."""


# Guards the first use of a context's event (made on demand: most jobs never need one).
_EVENT_LOCK = threading.Lock()


@dataclass
class LeaseContext:
    """What the worker keeps per held job, whichever kind of handler runs it."""

    lease: Lease
    lost: bool = False
    deadline: float = 0.0  # local monotonic time after which the lease must be presumed lost
    finishing: bool = False  # the handler returned; its result is being written
    committed: bool = False  # the handler's transaction() committed the job's completion
    # The local monotonic time past which the handler has run longer than the job's timeout
    # (inf: none), and whether it did (the worker then cancels it and fails the attempt).
    timeout_at: float = math.inf
    timed_out: bool = False
    # The handler's latest progress (ctx.progress) and the one the last heartbeat carried.
    _progress: tuple[float, str | None] | None = field(default=None, repr=False, compare=False)
    _progress_sent: tuple[float, str | None] | None = field(default=None, repr=False, compare=False)

    @property
    def job(self) -> Job:
        return self.lease.job

    @property
    def payload(self) -> Any:
        return self.lease.job.payload

    def is_cancelled(self) -> bool:
        raise NotImplementedError

    def _set_cancelled(self) -> None:
        raise NotImplementedError

    def snooze(self, delay: timedelta | float) -> NoReturn:
        """Put the job off (raises ``Snooze``: let it propagate): Pending again ``delay`` from
        now, without spending an attempt."""
        raise Snooze(delay)

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the handler got (0 to 1) and, optionally, what it is doing (cut to
        200 characters). Cheap: kept here, written by the worker's next heartbeat (only the
        latest report of each heartbeat interval is written); shown by `inspect` and the
        console until the job is claimed again."""
        self._progress = progress_value(fraction, message)

    def progress_due(self) -> tuple[float, str | None] | None:
        """(The heartbeat's.) The progress to write with the next heartbeat, if it changed."""
        latest = self._progress
        return None if latest is self._progress_sent else latest


@dataclass
class JobContext(LeaseContext):
    """What a handler gets: the job, its lease, and a flag raised when the lease is lost."""

    _cancelled: threading.Event | None = field(default=None, repr=False, compare=False)
    # The worker's way to open a handler transaction (None: outside a worker), and whether
    # this attempt has opened one.
    _open_transaction: Callable[[JobContext], AbstractContextManager[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    _transaction_used: bool = field(default=False, repr=False, compare=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the lease is lost or the worker shuts down: stop, the result will not be
        written. (Made on first use, under a lock, so every thread gets the same event.)"""
        event = self._cancelled
        if event is None:
            with _EVENT_LOCK:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    def is_cancelled(self) -> bool:
        """``cancelled.is_set()``, without making the event when nobody has asked for it."""
        event = self._cancelled
        return event is not None and event.is_set()

    def _set_cancelled(self) -> None:
        self.cancelled.set()

    def transaction(self) -> AbstractContextManager[Any]:
        """``with ctx.transaction() as conn:`` a psycopg connection in an open transaction;
        leaving the block normally completes the job (fenced) in that transaction and commits:
        the handler's writes on ``conn`` and the completion commit together or not at all.

        When the fence refuses (the lease was lost), the transaction rolls back, ``cancelled``
        is set and the block raises ``LeaseLost``. An exception inside the block rolls back and
        propagates (the job fails or is retried, as any handler exception). Once per attempt.
        """
        if self._open_transaction is None:
            raise RuntimeError("ctx.transaction() works only in a handler run by a worker")
        if self._transaction_used:
            raise RuntimeError("ctx.transaction() may be entered only once per attempt")
        self._transaction_used = True
        return self._open_transaction(self)


class CancelledEvent:
    """An async handler's ``ctx.cancelled``: ``await ctx.cancelled`` (or ``.wait()``) returns
    once the lease is lost or the worker shuts down. Set from any of the worker's threads; an
    ``asyncio.Event`` of the worker's loop underneath, set on that loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._flag = False
        self._event = asyncio.Event()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        if self._flag:
            return
        self._flag = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self) -> bool:
        if not self._flag:
            await self._event.wait()
        return True

    def __await__(self) -> Generator[Any, None, bool]:
        return self.wait().__await__()


@dataclass
class AsyncJobContext(LeaseContext):
    """What an ``async def`` handler gets: as ``JobContext``, with an awaitable ``cancelled``
    and ``async with ctx.transaction() as conn:`` (a ``psycopg.AsyncConnection``)."""

    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)
    _cancelled: CancelledEvent | None = field(default=None, repr=False, compare=False)
    _open_transaction: Callable[[AsyncJobContext], AbstractAsyncContextManager[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    _transaction_used: bool = field(default=False, repr=False, compare=False)
    _task: asyncio.Task[None] | None = field(default=None, repr=False, compare=False)
    _returned: bool = field(default=False, repr=False, compare=False)  # the handler ended

    @property
    def cancelled(self) -> CancelledEvent:
        """Set when the lease is lost or the worker shuts down: ``await ctx.cancelled``. The
        task is cancelled (``CancelledError``) if it is still running a grace period later."""
        event = self._cancelled
        if event is None:
            with _EVENT_LOCK:
                if self._cancelled is None:
                    self._cancelled = CancelledEvent(self._loop or asyncio.get_running_loop())
                event = self._cancelled
        return event

    def is_cancelled(self) -> bool:
        event = self._cancelled
        return event is not None and event.is_set()

    def _set_cancelled(self) -> None:
        self.cancelled.set()

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        """``async with ctx.transaction() as conn:`` ``JobContext.transaction`` on an
        ``AsyncConnection``: the handler's writes and the job's fenced completion commit
        together; ``LeaseLost`` (rolled back) when the lease was lost. Once per attempt."""
        if self._open_transaction is None:
            raise RuntimeError("ctx.transaction() works only in a handler run by a worker")
        if self._transaction_used:
            raise RuntimeError("ctx.transaction() may be entered only once per attempt")
        self._transaction_used = True
        return self._open_transaction(self)


Handler = Callable[[JobContext], object]
AsyncHandler = Callable[[AsyncJobContext], Awaitable[object]]


def is_async_handler(handler: object) -> bool:
    """An ``async def`` function (or a callable object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 (the method, not callability)
    )
