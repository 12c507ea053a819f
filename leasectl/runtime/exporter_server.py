"""The exporter's HTTP server (``leasectl metrics``): /metrics for Prometheus, bounded for every
other client. A client has ``REQUEST_TIMEOUT`` seconds in all to send its request (a deadline,
not a per-read timeout: a byte now and then does not keep a connection), at most
``MAX_CONNECTIONS`` are served at once (one more is told 503 and closed, so threads and file
descriptors stay bounded), and the listen backlog is ``BACKLOG``. What a scrape answers comes
from ``runtime/scrapes.py``: one database read shared by concurrent scrapes.

There is no authentication: /metrics shows queue names and lease owners to whoever reaches it.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

# Seconds a client has to send its whole request (request line and headers).
REQUEST_TIMEOUT = 5.0
# Seconds a response may take to be sent (a client that does not read).
WRITE_TIMEOUT = 10.0
# Connections served at once; a scrape needs one, Prometheus servers a few.
MAX_CONNECTIONS = 32
# Connections the kernel queues before the server accepts them.
BACKLOG = 128

_BUSY_TEXT = b"too many connections; retry later\n"
_BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


class _RequestBytes:
    """A request's bytes read against one deadline: each receive waits only for what is left
    of it (a buffered file would give every receive the whole timeout again)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.buffer = b""

    def close(self) -> None:
        self.buffer = b""  # the socket is the server's to close

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self.buffer.find(b"\n") + 1
            if limit >= 0 and (end == 0 or end > limit) and len(self.buffer) >= limit:
                end = limit
            if end:
                line, self.buffer = self.buffer[:end], self.buffer[end:]
                return line
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request was not received in time")
            self.sock.settimeout(left)
            chunk = self.sock.recv(4096)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def setup(self) -> None:
        super().setup()
        self.rfile = _RequestBytes(self.connection, time.monotonic() + REQUEST_TIMEOUT)  # type: ignore[assignment]

    def do_GET(self) -> None:
        body = generate_latest(self.server.registry)
        self.connection.settimeout(WRITE_TIMEOUT)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a client's timeouts and bad requests are its own business, not the exporter's log


class MetricsServer(ThreadingMixIn, HTTPServer):
    """/metrics over ``registry``, a thread per connection, at most MAX_CONNECTIONS of them."""

    daemon_threads = True  # a client still connected never holds up the exit
    block_on_close = False
    request_queue_size = BACKLOG

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self.address_family = family
        self.registry = registry
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__((str(address[0]), port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve(
    host: str, port: int, registry: CollectorRegistry
) -> tuple[MetricsServer, threading.Thread]:
    """Listen on ``host``:``port`` and serve in a thread (OSError if it cannot listen)."""
    server = MetricsServer(host, port, registry)
    thread = threading.Thread(target=server.serve_forever, name="leasectl-metrics-http")
    thread.daemon = True
    thread.start()
    return server, thread
