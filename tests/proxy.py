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


class _Stall(threading.Event):
    """A flow's stall, set under its lock: its pump reads under the same lock."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()


class StallingProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._lock = threading.Lock()
        self._flows: list[tuple[socket.socket, socket.socket, _Stall]] = []
        self._closed = threading.Event()
        self._stall_new = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def dsn(self, dsn: str) -> str:
        """``dsn`` through this proxy."""
        extra = {"hostaddr": "127.0.0.1"} if conninfo.conninfo_to_dict(dsn).get("hostaddr") else {}
        return conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port), **extra)

    def stall(self, *, new_too: bool = False) -> int:
        """Stop forwarding every flow open now (new ones still go through unless ``new_too``:
        then they are accepted and never answered); how many flows were stalled."""
        with self._lock:
            self._stall_new = new_too
            flows = list(self._flows)
        for _, _, stalled in flows:
            # (Under the flow's lock: once this returns, its pump reads no byte more. A byte
            # read and dropped would be a call that never shows as waiting.)
            with stalled.lock:
                stalled.set()
        return len(flows)

    def waiting(self) -> int:
        """Stalled flows whose client sent something that was not forwarded: calls waiting."""
        with self._lock:
            clients = [c for c, _, stalled in self._flows if stalled.is_set() and c.fileno() >= 0]
        try:
            ready, _, _ = select.select(clients, [], [], 0)
        except (OSError, ValueError):
            return 0
        waiting = 0
        for client in ready:
            with contextlib.suppress(OSError):
                # Data, not an end of file: a client that gave up is not waiting.
                waiting += bool(client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        return waiting

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
            stalled = _Stall()
            if self._stall_new:
                stalled.set()
            with self._lock:
                self._flows.append((client, server, stalled))
            threading.Thread(target=self._pump, args=(client, server, stalled), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket, stalled: _Stall) -> None:
        ends = {client: server, server: client}
        while not self._closed.is_set() and not stalled.is_set():
            ended = False
            try:
                ready, _, _ = select.select(list(ends), [], [], 0.1)
                with stalled.lock:
                    if stalled.is_set():
                        break
                    for s in ready:
                        data = s.recv(65536)
                        if not data:
                            ended = True
                            break
                        ends[s].sendall(data)
            except OSError:
                ended = True
            if ended:
                self._end(client, server)
                return
        # Stalled: the sockets stay open, unread and unwritten, until the proxy closes.

    def _end(self, client: socket.socket, server: socket.socket) -> None:
        with self._lock:
            self._flows = [f for f in self._flows if f[0] is not client]
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
