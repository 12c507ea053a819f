"""What every benchmark shares: the run context, fresh databases, seeding, processes, tables."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import conninfo, sql

from leasectl.db.connection import Database

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SCHEMA = "leasectl"
QUEUE = "default"


@dataclass(frozen=True)
class Sizes:
    """The sizes of one run: the issue's in full mode, tiny ones with --quick."""

    limit_seconds: int = 15
    # The 1, 4 and 16, and 2: one per core, where N client processes on these two
    # cores did best (leasectl's single-job mode is N worker processes, one per client).
    limit_clients: tuple[int, ...] = (1, 2, 4, 16)
    drain_jobs: int = 100_000
    drain_concurrency: tuple[int, ...] = (1, 10, 50)
    repeats: int = 3
    drain_timeout: float = 300.0
    steady_seconds: int = 300
    steady_fractions: tuple[float, ...] = (0.5, 0.9)
    console_sizes: tuple[int, ...] = (10_000, 1_000_000, 10_000_000)
    console_runs: int = 50
    # Pending jobs: the console and `status` while the queue backs up (bench/backlog.py).
    backlog_sizes: tuple[int, ...] = (10_000, 1_000_000, 10_000_000)
    watcher_jobs: int = 100_000
    held_jobs: int = 100_000
    held_concurrency: int = 10
    # bench/held_bloat.py: the horizon held this long at this many jobs a second, then the
    # time allowed for each table to come back to its baseline.
    held_bloat_seconds: int = 120
    held_bloat_rate: int = 500
    held_bloat_recover: int = 300
    held_bloat_history: int = 1_000_000


QUICK = Sizes(
    limit_seconds=2,
    drain_jobs=5_000,
    repeats=1,
    drain_timeout=10.0,
    steady_seconds=20,
    console_sizes=(10_000, 100_000),
    console_runs=20,
    backlog_sizes=(10_000, 100_000),
    watcher_jobs=5_000,
    held_jobs=5_000,
    held_bloat_seconds=20,
    held_bloat_rate=100,
    held_bloat_recover=60,
    held_bloat_history=0,
)


@dataclass
class Ctx:
    """One benchmark run against one server."""

    dsn: str  # an admin DSN of the server (any database); benchmarks create their own
    sizes: Sizes
    peers: tuple[str, ...]
    results: dict[str, Any] = field(default_factory=dict)
    counter: int = 0

    def db_dsn(self, dbname: str) -> str:
        return conninfo.make_conninfo(self.dsn, dbname=dbname)

    def fresh_db(self, label: str) -> str:
        """Create an empty database for one measurement; returns its DSN."""
        self.counter += 1
        name = f"bench_{label}_{os.getpid()}_{self.counter}"[:63]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.db_dsn(name)

    def drop_db(self, dsn: str) -> None:
        name = conninfo.conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
            )


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# -- leasectl databases --------------------------------------------------------------------


def leasectl_init(dsn: str) -> None:
    with Database.connect(dsn, SCHEMA, check_schema=False) as db:
        db.migrate()


def seed_pending(dsn: str, n: int, queue: str = QUEUE) -> None:
    """n no-op jobs, all due now, in one statement (the producer API is measured in `steady`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, run_at) "
            "SELECT %s, now() - interval '1 minute' FROM generate_series(1, %s)",
            (queue, n),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")


def scalar(dsn: str, query: str, params: Sequence[Any] | None = None) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


# -- processes ------------------------------------------------------------------------------


class Proc:
    """A process we started, with its stderr in a file (a pipe nobody reads would block it)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.log = tempfile.TemporaryFile()
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # stopping it never signals us
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 1500) -> str:
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - n))
        return self.log.read().decode(errors="replace")


def stop(procs: Sequence[Proc], timeout: float = 15.0) -> None:
    """SIGTERM every process we started, then SIGKILL (by its own pid) the ones that linger."""
    for p in procs:
        if p.alive():
            with contextlib.suppress(ProcessLookupError):
                p.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.popen.wait()


def cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            out[pid] = t.user + t.system + t.children_user + t.children_system
    return out


class ServerCpu:
    """CPU seconds used by the server's processes between start() and stop().

    Finds the postmaster through our own backend; needs the server on this machine (it is).
    """

    def __init__(self, dsn: str) -> None:
        self.postmaster: psutil.Process | None = None
        with contextlib.suppress(Exception), psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            # (asked while the backend is alive: once its connection closes it may be gone)
            self.postmaster = psutil.Process(int(row[0]) if row else 0).parent()
        self.before: dict[int, float] = {}

    def _children(self) -> list[int]:
        if self.postmaster is None:
            return []
        with contextlib.suppress(psutil.Error):
            return [c.pid for c in self.postmaster.children()]
        return []

    def start(self) -> None:
        self.before = cpu_seconds(self._children())

    def stop(self) -> float | None:
        if self.postmaster is None:
            return None
        now = cpu_seconds(self._children())
        return round(sum(v - self.before.get(pid, 0.0) for pid, v in now.items()), 2)


# -- figures --------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (so that it pastes into BENCHMARKS.md as is)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    return "\n".join([f"\n### {title}\n", line, sep, *body, ""])


@contextlib.contextmanager
def server_dsn(dsn: str | None, durable: bool = False) -> Iterator[str]:
    """``dsn`` as given; without one, a temporary embedded server's for the block (``durable``:
    fsync, synchronous_commit and full_page_writes on), removed afterwards."""
    if dsn is not None:
        yield dsn
        return
    from leasectl.db.embedded import EmbeddedServer

    server = EmbeddedServer.temporary(durable=durable)
    log(f"starting a temporary{' durable' if durable else ''} embedded server in {server.base_dir}")
    server.start()
    try:
        yield server.dsn()
    finally:
        server.stop(remove=True)


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """with timed() as t: ...; t[0] is the elapsed seconds afterwards."""
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)
