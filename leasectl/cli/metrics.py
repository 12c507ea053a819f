"""``leasectl metrics``: serve Prometheus metrics read from the database on each scrape."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Annotated

import typer

from leasectl.cli.root import _duration, _emit_json, _globals, _say
from leasectl.cli.stderr import LogFormat, LogLevel, _setup_logging, _warn
from leasectl.core import config
from leasectl.core.errors import LeasectlError
from leasectl.core.literal import echo


def metrics(
    ctx: typer.Context,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            metavar="HOST:PORT",
            help="Where to serve /metrics: 127.0.0.1:9464, [::1]:9464, 0.0.0.0:9464 (every "
            "interface: /metrics has no authentication); port 0 picks a free port.",
            show_default=False,
        ),
    ],
    timeout: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help="A scrape's limit for reaching and reading the database (wall clock); past it "
            "the scrape answers leasectl_up 0.",
        ),
    ] = "5s",
    log_level: Annotated[
        LogLevel, typer.Option(help="Log level (a failed scrape logs a warning once).")
    ] = LogLevel.INFO,
    log_format: Annotated[
        LogFormat,
        typer.Option(help="Log lines as text, or json: one JSON object per line (docs/design.md)."),
    ] = LogFormat.TEXT,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print where it serves as one JSON line (URL, host, port)."),
    ] = False,
) -> None:
    """Serve Prometheus metrics (/metrics) until SIGTERM/SIGINT: each scrape reads the queue."""
    # Here, not above: --help and a TAB import this module too (cli/commands.py).
    from prometheus_client import CollectorRegistry

    from leasectl.db.connection import Database
    from leasectl.db.metrics import MetricsReads
    from leasectl.runtime.exporter import FOLD_EVERY, LeasectlCollector
    from leasectl.runtime.exporter_server import serve

    host, port = config.parse_listen(listen)
    limit = _duration(timeout, "--timeout")
    dsn, schema = _globals(ctx).resolve()
    _setup_logging(log_level, log_format)

    def connect() -> MetricsReads:
        return MetricsReads(
            Database.connect(
                dsn,
                schema,
                max_size=1,
                application_name="leasectl metrics",
                pool_timeout=limit.total_seconds(),
                on_newer=_warn,
            )
        )

    # The first connection is made here: a wrong DSN or schema is an error now, not a silent 0.
    first = connect()
    collector = LeasectlCollector(first, limit, connect)
    try:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(collector)
        try:
            server, thread = serve(host, port, registry)
        except OSError as exc:
            raise LeasectlError(f"cannot listen on {echo(listen)}: {exc.strerror or exc}") from None
        bound_host, bound_port = str(server.server_address[0]), int(server.server_address[1])
        shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        url = f"http://{shown_host}:{bound_port}/metrics"
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if as_json:
                _emit_json({"listen": url, "host": bound_host, "port": bound_port}, indent=None)
            elif log_format is LogFormat.JSON:  # (every line it writes is JSON: on stderr)
                logging.getLogger("leasectl.metrics").info(
                    "serving metrics of schema %s at %s on %s", echo(schema), first.db.where, url
                )
            else:
                _say(f"serving metrics of schema {echo(schema)} at {first.db.where} on {url}")
            # The fold runs on the collector's database thread: this loop only waits for a
            # signal, so SIGTERM ends the exporter whatever the database does.
            while not stop.wait(FOLD_EVERY):
                collector.fold()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    finally:
        collector.close()
