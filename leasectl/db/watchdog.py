"""A wall-clock bound on a blocking database call: past it, the connection's socket is shut down,
so that the call fails at once as a lost connection (and the pool replaces it).

TCP keepalives and ``tcp_user_timeout`` (``session.py``) end a connection whose packets are
dropped, but not one whose peer still acknowledges them and never answers (a stalled proxy or
load balancer), and not sooner than about half a minute. A worker's round trip or a console
refresh that outlives its bound is then no use: failing it lets the caller reconnect.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

log = logging.getLogger(__name__)

_CHECK_EVERY_S = 0.1


class Watchdog:
    """The calls under way, each with its deadline and socket; one daemon thread ends those
    that outlive it. One per process (``WATCHDOG``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # token -> deadline, descriptor, owner, whether the descriptor is the watchdog's own
        self._calls: dict[int, tuple[float, int, object, bool]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self.fired = 0  # calls ended by their bound (for tests and logs)

    @contextlib.contextmanager
    def bound(
        self, conn: psycopg.Connection[Any], seconds: float | None, owner: object = None
    ) -> Iterator[None]:
        """Within this block, ``conn``'s socket is shut down ``seconds`` after its start (None:
        no bound), or when ``owner`` (whose call this is) is aborted."""
        token = self.start(conn, seconds, owner)
        try:
            yield
        finally:
            self.stop(token)

    def start(
        self, conn: psycopg.Connection[Any], seconds: float | None, owner: object = None
    ) -> int:
        """``bound``'s start, for the hot path (no generator): a token for ``stop`` (0: none).
        A call without a bound is still registered when it has an owner, for ``abort``.

        The watchdog holds its own descriptor of the socket (a ``dup``, 0.3 µs), closed when the
        call's entry goes: libpq may close its descriptor before the call returns (a server
        that went away), and a socket another thread opens meanwhile may take that number;
        shutting the number down would then cut that other socket. The watchdog's own keeps the
        call's socket open until then. (A process out of descriptors falls back to libpq's.)"""
        if seconds is None and owner is None:
            return 0
        deadline = time.monotonic() + seconds if seconds is not None else math.inf
        fd = conn.pgconn.socket
        try:
            entry = (deadline, os.dup(fd), owner, True)
        except OSError:
            entry = (deadline, fd, owner, False)
        with self._lock:
            self._next += 1
            token = self._next
            self._calls[token] = entry
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="leasectl-watchdog", daemon=True
                )
                self._thread.start()
        if not self._wake.is_set():
            self._wake.set()
        return token

    def stop(self, token: int) -> None:
        if token:
            with self._lock:
                entry = self._calls.pop(token, None)
            if entry is not None:
                _release(entry)

    def abort(self, owner: object) -> int:
        """End every call of ``owner`` under way now (a console that quits); how many."""
        with self._lock:
            tokens = [t for t, (_, _, o, _) in self._calls.items() if o is owner]
            for token in tokens:
                _cut(self._calls.pop(token))
        return len(tokens)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            now = time.monotonic()
            with self._lock:
                late = [t for t, (deadline, _, _, _) in self._calls.items() if deadline <= now]
                for token in late:
                    # (Under the lock: a call that ends meanwhile finds its entry gone, and its
                    # stop has nothing to release.)
                    _cut(self._calls.pop(token))
                    self.fired += 1
                if not self._calls:
                    self._wake.clear()
            if late:
                # The caller then sees "server closed the connection": say that it was us.
                log.warning(
                    "%d database call(s) unanswered past their bound: connection(s) cut, to be "
                    "replaced",
                    len(late),
                )
            time.sleep(_CHECK_EVERY_S)


def _cut(entry: tuple[float, int, object, bool]) -> None:
    """Shut a call's socket down, then release its entry's descriptor."""
    _shut(entry[1])
    _release(entry)


def _release(entry: tuple[float, int, object, bool]) -> None:
    """Close the watchdog's own descriptor of a call's socket (never libpq's)."""
    if entry[3]:
        with contextlib.suppress(OSError):
            os.close(entry[1])


def _shut(fd: int) -> None:
    """Shut the socket down (not close: a descriptor of libpq's stays libpq's): a blocked read
    returns. A descriptor already closed (libpq's, in the fallback: the call failed on its own, a
    server that went away, and has not returned yet) is left alone: the watchdog's thread must
    outlive it."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return  # closed: nothing to shut
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already gone
    finally:
        sock.detach()


WATCHDOG = Watchdog()
