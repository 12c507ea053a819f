"""The watchdog's thread outlives a call whose socket libpq closed before the call returned (a
server that went away): it shuts the sockets still open and ignores the closed one."""

from __future__ import annotations

import socket
import time

from leasectl.db.watchdog import Watchdog, _shut


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
        dog._calls[1] = (time.monotonic() - 1, closed_fd, None)
        dog._next = 1
        token = dog.start(_Conn(live.fileno()), 0.05)  # type: ignore[arg-type]
        deadline = time.monotonic() + 5
        while dog.fired < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert dog.fired == 2
        assert dog._thread is not None and dog._thread.is_alive()
        live.settimeout(5)
        assert live.recv(1) == b""  # shut down: a blocked read returns at once
        dog.stop(token)
    finally:
        for s in (peer, live, other):
            s.close()


class _Conn:
    """What Watchdog.start reads of a connection: its socket's descriptor."""

    def __init__(self, fd: int) -> None:
        self.pgconn = type("PgConn", (), {"socket": fd})()
