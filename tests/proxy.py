"""A TCP proxy for tests that can silently stop forwarding the flows it carries: nothing is reset
or closed, the kernel still acknowledges what is sent, and new connections go through, as when a
NAT, a load balancer or a firewall forgets its existing flows."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator

from psycopg import conninfo


class StallingProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._lock = threading.Lock()
        self._flows: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def dsn(self, dsn: str) -> str:
        """``dsn`` through this proxy."""
        extra = {"hostaddr": "127.0.0.1"} if conninfo.conninfo_to_dict(dsn).get("hostaddr") else {}
        return conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port), **extra)

    def stall(self) -> int:
        """Stop forwarding every flow open now (new ones still go through); how many."""
        with self._lock:
            for _, _, stalled in self._flows:
                stalled.set()
            return len(self._flows)

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
        with self._lock:
            for a, b, _ in self._flows:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            stalled = threading.Event()
            with self._lock:
                self._flows.append((client, server, stalled))
            threading.Thread(target=self._pump, args=(client, server, stalled), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket, stalled: threading.Event) -> None:
        ends = {client: server, server: client}
        while not self._closed.is_set() and not stalled.is_set():
            try:
                ready, _, _ = select.select(list(ends), [], [], 0.1)
                for s in ready:
                    data = s.recv(65536)
                    if not data or stalled.is_set():
                        if not data:
                            self._end(client, server)
                            return
                        break
                    ends[s].sendall(data)
            except OSError:
                self._end(client, server)
                return
        # Stalled: the sockets stay open, unread and unwritten, until the proxy closes.

    def _end(self, client: socket.socket, server: socket.socket) -> None:
        for s in (client, server):
            with contextlib.suppress(OSError):
                s.close()


@contextlib.contextmanager
def stalling_proxy(dsn: str) -> Iterator[StallingProxy]:
    params = conninfo.conninfo_to_dict(dsn)
    host = str(params.get("host") or "127.0.0.1")
    if host.startswith("/"):
        host = "127.0.0.1"
    proxy = StallingProxy(host, int(params.get("port") or 5432))
    try:
        yield proxy
    finally:
        proxy.close()
