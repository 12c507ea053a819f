"""The watchdog's thread outlives a call whose socket libpq closed before the call returned (a
server that went away): it shuts the sockets still open and ignores the closed one, and never
cuts another socket that took the closed one's number."""

from __future__ import annotations

import os
import socket
import time

from leasectl.db.watchdog import Watchdog, _shut
from tests.util import wait_until


def test_shutting_a_closed_descriptor_is_no_error() -> None:
    a, b = socket.socketpair()
    fd = a.fileno()
    a.close()
    b.close()
    _shut(fd)  # (EBADF before: the watchdog's thread died of it)


def test_the_thread_survives_a_closed_socket_and_still_cuts_the_next_call() -> None:
    dog = Watchdog()
    live, other = socket.socketpair()
    closed, peer = socket.socketpair()  # (after the live pair: its descriptor is not reused)
    closed_fd = closed.fileno()
    closed.close()
    try:
        # Two calls past their deadline: one whose socket libpq closed, one still blocked.
        # (Not the watchdog's own descriptor: as when a process is out of descriptors.)
        dog._calls[1] = (time.monotonic() - 1, closed_fd, None, False)
        dog._next = 1
        token = dog.start(_Conn(live.fileno()), 0.05)  # type: ignore[arg-type]
        wait_fired(dog, 2)
        assert dog._thread is not None and dog._thread.is_alive()
        live.settimeout(5)
        assert live.recv(1) == b""  # shut down: a blocked read returns at once
        dog.stop(token)
    finally:
        for s in (peer, live, other):
            s.close()


def test_a_socket_that_took_a_closed_calls_number_is_not_cut() -> None:
    dog = Watchdog()
    call, server = socket.socketpair()
    number = call.fileno()
    token = dog.start(_Conn(number), 0.2)  # type: ignore[arg-type]
    call.close()  # libpq closed its descriptor; the call has not returned yet
    other, other_peer = socket.socketpair()  # another thread's connection, opened meanwhile
    try:
        assert number in (other.fileno(), other_peer.fileno())  # the number, reused
        wait_fired(dog, 1)
        # Still whole, both ways (shut down, a read would return b"" and a write fail).
        for a, b in ((other, other_peer), (other_peer, other)):
            a.sendall(b"x")
            b.settimeout(5)
            assert b.recv(1) == b"x"
        server.settimeout(5)
        assert server.recv(1) == b""  # the call's own socket was cut
        dog.stop(token)
    finally:
        for s in (other, other_peer, server):
            s.close()


def test_the_watchdogs_own_descriptors_are_closed_when_calls_end_or_are_cut() -> None:
    dog = Watchdog()
    a, b = socket.socketpair()
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(50):
            dog.stop(dog.start(_Conn(a.fileno()), 30))  # type: ignore[arg-type]
        dog.start(_Conn(a.fileno()), 0.01)  # type: ignore[arg-type]
        wait_fired(dog, 1)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        a.close()
        b.close()


def wait_fired(dog: Watchdog, n: int) -> None:
    """Until the watchdog has cut ``n`` calls (5 s at most), then that it has cut exactly ``n``."""
    wait_until(lambda: dog.fired >= n, timeout=5, interval=0.01, what=f"{n} calls cut")
    assert dog.fired == n


class _Conn:
    """What Watchdog.start reads of a connection: its socket's descriptor."""

    def __init__(self, fd: int) -> None:
        self.pgconn = type("PgConn", (), {"socket": fd})()
