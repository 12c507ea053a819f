"""``python -m bench.chaos``: its options, its target (an owned server, a replicated pair, or a
schema of a given one), the run, and its exit code."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import secrets
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import sql

from bench.chaos.controller import Chaos
from bench.chaos.model import Report, Settings
from bench.chaos.report import render
from bench.failover import Replicas
from leasectl.core.config import parse_duration
from leasectl.core.errors import LeasectlError
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.replication import replicated_pair

DESCRIPTION = "Chaos soak: real worker processes, SIGKILL, SIGSTOP past the lease, server restarts."


@contextlib.contextmanager
def _target(
    settings: Settings,
) -> Iterator[tuple[str, str, EmbeddedServer | Replicas | None, str]]:
    """(dsn, schema, server, description): an owned embedded server, an owned replicated pair
    (``Replicas``), or a fresh schema (no server)."""
    if settings.failover is not None:
        # The pair goes with its directory, --keep or not: a failover run is not resumed.
        sync = settings.failover == "sync"
        with replicated_pair(synchronous=sync) as (primary, standby):
            replicas = Replicas(primary.base_dir.parent, primary, standby, sync=sync)
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                version = conn.execute("SHOW server_version").fetchone()
            yield (
                replicas.dsn,
                "leasectl",
                replicas,
                f"embedded PostgreSQL {version[0] if version else '?'}, a primary and its "
                f"{'synchronous' if sync else 'asynchronous'} standby, one multi-host DSN",
            )
        return
    if settings.dsn is None:
        server = EmbeddedServer(EmbeddedServer.temporary().base_dir, durable=True)
        server.start()
        ok = False
        try:
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                version = conn.execute("SHOW server_version").fetchone()
            yield (
                server.dsn(),
                "leasectl",
                server,
                f"embedded durable PostgreSQL {version[0] if version else '?'} "
                f"in {server.base_dir}",
            )
            ok = True
        finally:
            keep = settings.keep or not ok
            server.stop(remove=not keep)
            if keep:
                print(f"kept the server directory {server.base_dir}", file=sys.stderr)
        return
    schema = f"chaos_{secrets.token_hex(4)}"
    try:
        yield settings.dsn, schema, None, f"external server, schema {schema}"
    finally:
        if not settings.keep:
            with psycopg.connect(settings.dsn, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


def run(settings: Settings, json_out: Path | None = None) -> Report:
    with (
        _target(settings) as (dsn, schema, target, where),
        tempfile.TemporaryDirectory(prefix="leasectl-chaos-") as tmp,
    ):
        workdir = Path(tmp)
        if settings.keep:
            workdir = Path(tempfile.mkdtemp(prefix="leasectl-chaos-logs-"))
        server = target if isinstance(target, EmbeddedServer) else None
        replicas = target if isinstance(target, Replicas) else None
        report = Chaos(settings, dsn, schema, workdir, server, replicas).run()
        if report.violations and not settings.keep:
            kept = Path(tempfile.mkdtemp(prefix="leasectl-chaos-logs-"))
            for path in workdir.glob("*.log"):
                path.rename(kept / path.name)
            print(f"worker logs kept in {kept}", file=sys.stderr)
        print(render(report, where), flush=True)
        if json_out is not None:
            json_out.write_text(json.dumps(report.to_json(), indent=2, default=str) + "\n")
        if report.violations:
            raise _Failed(report)
    return report


class _Failed(Exception):
    """Carries a failing report out of the server context (which then keeps the server)."""

    def __init__(self, report: Report) -> None:
        super().__init__("invariants violated")
        self.report = report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=DESCRIPTION)
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--duration", default="10m", help="chaos time (30s, 10m, ...)")
    p.add_argument("--dsn", default=None, help="an existing server (no restarts); default: own")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--concurrency", type=int, default=4, help="handler threads per worker")
    p.add_argument("--lease-ttl", default="2s")
    p.add_argument("--heartbeat", default="500ms")
    p.add_argument("--watch-interval", default="500ms")
    p.add_argument("--action-gap", default=None, help="mean time between chaos actions")
    p.add_argument(
        "--transaction-fraction",
        type=float,
        default=0.5,
        help="share of jobs completed inside the handler's transaction (ctx.transaction())",
    )
    p.add_argument(
        "--failover",
        choices=["sync", "async"],
        default=None,
        help="a primary and its (synchronous or asynchronous) standby on one multi-host DSN, "
        "failed over --failovers times (instead of server restarts)",
    )
    p.add_argument("--failovers", type=int, default=2)
    p.add_argument(
        "--async-handlers",
        action="store_true",
        help="the workers run an async def handler (tasks of one event loop, uvloop's)",
    )
    p.add_argument(
        "--lag",
        default="500ms",
        help="before each failover, the standby's WAL receiver is stopped this long (0: none)",
    )
    p.add_argument("--drain-timeout", default="5m")
    p.add_argument("--keep", action="store_true", help="keep the server directory and logs")
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    seconds = lambda text, what: parse_duration(text, what=what).total_seconds()  # noqa: E731
    try:
        settings = Settings(
            workers=a.workers,
            jobs=a.jobs,
            duration=seconds(a.duration, "--duration"),
            dsn=a.dsn,
            seed=a.seed if a.seed is not None else random.randrange(1_000_000),
            concurrency=a.concurrency,
            lease_ttl=seconds(a.lease_ttl, "--lease-ttl"),
            heartbeat=seconds(a.heartbeat, "--heartbeat"),
            watch_interval=seconds(a.watch_interval, "--watch-interval"),
            action_gap=seconds(a.action_gap, "--action-gap") if a.action_gap else None,
            drain_timeout=seconds(a.drain_timeout, "--drain-timeout"),
            transaction_fraction=a.transaction_fraction,
            async_handlers=a.async_handlers,
            keep=a.keep,
            failover=a.failover,
            failovers=a.failovers,
            lag=parse_duration(a.lag, what="--lag", allow_zero=True).total_seconds(),
        )
        run(settings, a.json)
    except _Failed:
        return 1
    except LeasectlError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        return 2
    return 0
