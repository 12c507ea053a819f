"""No role may freeze, blind or crash the exporter, the counters'
fold or the watcher behind them, with real roles made by `leasectl grant`, a real `leasectl
metrics` process, a real black hole (a proxy that stops forwarding) and real slow clients."""

from __future__ import annotations

import contextlib
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, errors

from leasectl.core.models import JobStatus
from leasectl.db import grants
from leasectl.db.metrics import MetricsReads, MetricsRows
from leasectl.runtime.exporter import LeasectlCollector
from leasectl.runtime.exporter_server import MAX_CONNECTIONS, REQUEST_TIMEOUT
from leasectl.runtime.watcher import STOP_GRACE, Watcher, WatcherConfig
from tests.exporter import exporter, scrape
from tests.integration.test_cli import _env
from tests.integration.test_privileges import Roles, login_roles
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

TTL = timedelta(seconds=30)


@pytest.fixture
def roles(server_dsn: str, db_dsn: str, store: Stores) -> Iterator[Roles]:
    tag = secrets.token_hex(4)
    names = {kind: f"lc_abuse_{kind}_{tag}" for kind in ("viewer", "operator", "worker")}
    with login_roles(server_dsn, db_dsn, names) as made:
        grants.apply(store.db, [grants.Grant(grants.Kind(k), n) for k, n in names.items()])
        yield made


def _complete(store: Stores, queue: str, n: int) -> None:
    """``n`` jobs of ``queue`` completed, one statement each: ``n`` outcome deltas (in the
    history's deltas since migration 27), and the queue paused and resumed: 2 counter deltas."""
    for job in store.ops.enqueue([{}] * n, queue=queue):
        assert store.work.complete(store.work.claim(queue, "w", TTL)) == {job}
    store.ops.pause(queue, actor="operator:t@h", reason="abuse")
    store.ops.resume(queue, actor="operator:t@h")


def _unfolded(conn: psycopg.Connection, queue: str) -> int:
    """The completions of ``queue`` no fold has moved yet."""
    row = conn.execute(
        "SELECT coalesce(sum(delta), 0) FROM leasectl.queue_history_deltas "
        "WHERE queue = %s AND counter = 'completed'",
        (queue,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _in_thread(call: Any, timeout: float) -> tuple[bool, Any]:
    """(returned within ``timeout``, its result): a call that hangs fails the test, not pytest."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    return (not thread.is_alive(), result[0] if result else None)


def test_a_fold_left_open_freezes_no_fold_no_scrape_and_no_watcher_pass(
    roles: Roles, db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """A viewer may no longer fold; an operator that folds and leaves its transaction open
    (holding the totals' rows and the deltas it took) delays nothing: another fold skips what it
    holds, a scrape answers in time with every value, and the watcher requeues a fresh expired
    lease at its next pass."""
    _complete(store, "q", 2)
    assert store.ops.fold_counters() == 2  # the keys have their totals rows, committed
    _complete(store, "q", 3)
    with psycopg.connect(roles.dsn("viewer")) as viewer:
        with pytest.raises(errors.InsufficientPrivilege):
            viewer.execute("SELECT leasectl.counters_fold(100000)")
    holder = psycopg.connect(roles.dsn("operator"))  # its transaction stays open
    watcher: Watcher | None = None
    thread: threading.Thread | None = None
    try:
        # The whole fold, as `watch` and the exporter run it: the counters' and the history's.
        held = holder.execute(
            "SELECT leasectl.counters_fold(100000), leasectl.history_fold(100000, 10, 100, 10)"
        ).fetchone()
        # 2 pauses and resumes; the 3 completions, their enqueue and their 3 pickups.
        assert held == (2, 7)
        _complete(store, "q", 3)  # deltas of the keys the holder locked
        _complete(store, "other", 2)  # and of keys nobody holds
        returned, moved = _in_thread(store.ops.fold_counters, 5)
        assert returned, "a fold waited for the open transaction"
        assert moved == 2  # the free keys' deltas; the held keys' wait for a later fold
        # (The holder's deletes are not committed: its 3 are still seen, with the 3 since.)
        assert _unfolded(sql_conn, "q") == 6 and _unfolded(sql_conn, "other") == 0
        # The exporter as a viewer (reads only) and as an operator (folds every second).
        for kind in ("viewer", "operator"):
            with exporter(roles.dsn(kind), "--timeout", "2s", stopped_by_test=True) as (proc, url):
                for _ in range(3):
                    started = time.monotonic()
                    s = scrape(url, timeout=10)
                    assert time.monotonic() - started < 3
                    assert s.value("leasectl_up") == 1
                    assert s.value("leasectl_jobs_completed_total", queue="q") == 8
                    assert s.value("leasectl_jobs_completed_total", queue="other") == 2
                started = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(10) == 0
                assert time.monotonic() - started < 5
        # The watcher's pass (and its fold after it) goes on: a fresh expired lease is requeued.
        (job,) = store.ops.enqueue([{}], queue="w")
        store.work.claim("w", "gone", TTL)
        watcher = Watcher(store.ops, WatcherConfig(interval=timedelta(seconds=0.2), actor="w@t"))
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        wait_until(lambda: watcher is not None and watcher.passes >= 2, timeout=10)
        sql_conn.execute(
            "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
            (job,),
        )
        wait_until(
            lambda: store.ops.inspect(job).job.status == JobStatus.PENDING,
            timeout=5,
            what="the watcher requeues the expired lease while a fold is held open",
        )
    finally:
        if watcher is not None and thread is not None:
            watcher.stop()
            thread.join(30)
        holder.rollback()
        holder.close()
    # Rolled back, the holder's fold never happened: its deltas and those since fold now.
    assert store.ops.fold_counters() == 4
    assert _unfolded(sql_conn, "q") == 0
    assert _collect_counters(store) == {("completed", "q"): 8, ("completed", "other"): 2}


def _collect_counters(store: Stores) -> dict[tuple[str, str], int]:
    rows = MetricsReads(store.db).read(timedelta(seconds=10))
    return {
        (c.counter, c.queue): c.value
        for c in rows.counters
        if c.queue != "w" and c.counter == "completed"
    }


def test_a_worker_flipping_an_attempts_outcome_counts_it_once(roles: Roles, store: Stores) -> None:
    """A worker may write an attempt's outcome; flipping an ended one (completed -> failed ->
    completed, or back to running) counted it again and again. An ended outcome is final."""
    _complete(store, "q", 1)
    with psycopg.connect(roles.dsn("worker"), autocommit=True) as conn:
        for outcome in ("failed", "running", "expired", "released"):
            with pytest.raises(errors.CheckViolation):
                conn.execute("UPDATE leasectl.job_attempts SET outcome = %s", (outcome,))
        conn.execute("UPDATE leasectl.job_attempts SET outcome = 'completed'")  # no change
        # What a worker may still write of an ended attempt, and its heartbeat: no count.
        conn.execute("UPDATE leasectl.job_attempts SET error = 'x', heartbeat_at = now()")
    assert _collect_counters(store) == {("completed", "q"): 1}


# -- the wall clock and SIGTERM, whatever the database does ---------------------------------


class BlackHole:
    """A TCP proxy to the test's server that, once ``hole`` is set, swallows every byte in
    both directions without closing anything: a network whose packets vanish."""

    def __init__(self, dsn: str) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host, port = str(params.get("host") or "/tmp"), int(params.get("port") or 5432)
        self.upstream: tuple[int, Any] = (
            (socket.AF_UNIX, f"{host}/.s.PGSQL.{port}")
            if host.startswith("/")
            else (socket.AF_INET, (host, port))
        )
        self.hole = threading.Event()
        self.swallowed = 0  # bytes sent into the hole
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.dsn = conninfo.make_conninfo(
            dsn, host="127.0.0.1", port=str(self.listener.getsockname()[1])
        )
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.socket(self.upstream[0], socket.SOCK_STREAM)
                server.connect(self.upstream[1])
                self.sockets += [client, server]
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not self.hole.is_set():
                    dst.sendall(data)
                else:
                    self.swallowed += len(data)

    def close(self) -> None:
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()


def test_a_black_holed_connection_answers_down_within_the_timeout_and_sigterm_ends_it(
    db_dsn: str, store: Stores
) -> None:
    store.ops.enqueue([{}], queue="q")
    hole = BlackHole(db_dsn)
    try:
        with exporter(hole.dsn, "--timeout", "1s", stopped_by_test=True) as (proc, url):
            assert scrape(url).value("leasectl_up") == 1
            hole.hole.set()
            # (The last read answers the scrapes of the next second; a failure is not kept.)
            wait_until(lambda: scrape(url, timeout=10).value("leasectl_up") == 0, timeout=10)
            for _ in range(3):  # each scrape answers by its own deadline, none piles up
                started = time.monotonic()
                down = scrape(url, timeout=10)
                assert time.monotonic() - started < 2.5
                assert down.value("leasectl_up") == 0
                assert down.get("leasectl_scrape_error_info", error="ScrapeTimeout") == 1
            hole.hole.clear()  # new connections work again; the swallowed ones never will
            wait_until(
                lambda: scrape(url, timeout=10).value("leasectl_up") == 1,
                timeout=15,
                what="a scrape on a new connection",
            )
            hole.hole.set()
            wait_until(lambda: scrape(url, timeout=10).value("leasectl_up") == 0, timeout=10)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0
            assert time.monotonic() - started < 5
            _, err = proc.communicate()
        assert "scrape failed: ScrapeTimeout: the database did not answer within 1s" in err
    finally:
        hole.close()


def test_sigterm_ends_watch_while_its_pass_waits_for_a_black_holed_database(
    db_dsn: str,
) -> None:
    hole = BlackHole(db_dsn)
    proc = subprocess.Popen(
        [sys.executable, "-m", "leasectl", "watch", "--interval", "200ms"],
        env=_env(hole.dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "watching all queues" in proc.stderr.readline()
        hole.hole.set()
        wait_until(lambda: hole.swallowed > 0, what="the next pass sends into the hole")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_GRACE + 10) == 0
        assert time.monotonic() - started < STOP_GRACE + 3
        _, err = proc.communicate()
        assert "the pass did not end within 5s of the signal" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        hole.close()


# -- a well-behaved server -----------------------------------------------------------------


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)$", status, re.MULTILINE)
    assert found
    return int(found.group(1))


def _answers(url: str) -> bool:
    """A scrape answers (503: the server is full, said at once)."""
    try:
        return scrape(url, timeout=5).value("leasectl_up") == 1
    except urllib.error.HTTPError as exc:
        assert exc.code == 503
        return False


def test_slow_clients_neither_block_a_scrape_nor_pile_up_threads(db_dsn: str) -> None:
    """Slow-loris: clients that send part of a request and wait held a thread each forever
    (3,290 seen) and, past the file descriptors, every real scrape timed out."""
    with exporter(db_dsn) as (proc, url):
        parts = urllib.parse.urlsplit(url)
        where = (parts.hostname or "", parts.port or 0)
        partial = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
        held: list[socket.socket] = []
        try:
            for _ in range(MAX_CONNECTIONS // 2):
                held.append(socket.create_connection(where, timeout=5))
                held[-1].sendall(partial)
            started = time.monotonic()
            assert scrape(url, timeout=5).value("leasectl_up") == 1
            assert time.monotonic() - started < 3
            for _ in range(300):
                with contextlib.suppress(OSError):
                    s = socket.create_connection(where, timeout=5)
                    held.append(s)
                    s.sendall(partial)
            assert _threads(proc.pid) < MAX_CONNECTIONS + 20
            # A request byte now and then does not keep a connection past the deadline.
            trickler = socket.create_connection(where, timeout=5)
            held.append(trickler)
            wait_until(
                lambda: _answers(url),
                timeout=REQUEST_TIMEOUT + 10,
                what="a scrape once the slow clients' deadline passed",
            )
            trickled = time.monotonic()
            with contextlib.suppress(OSError):
                for byte in partial * 10:
                    trickler.sendall(bytes([byte]))
                    time.sleep(0.25)
            assert time.monotonic() - trickled < REQUEST_TIMEOUT + 3
        finally:
            for s in held:
                s.close()


def test_concurrent_scrapes_share_one_database_read(db_dsn: str, store: Stores) -> None:
    """Thirty clients scraping at once cost one read (it answers the scrapes of a second)."""
    reads: list[float] = []

    class Counted(MetricsReads):
        def read(self, timeout: timedelta) -> MetricsRows:
            reads.append(time.monotonic())
            return super().read(timeout)

    counted = Counted(store.db)
    collector = LeasectlCollector(counted, timedelta(seconds=5), lambda: counted)
    start = threading.Barrier(30)
    ups: list[float] = []

    def one() -> None:
        start.wait()
        for family in collector.collect():
            if family.name == "leasectl_up":
                ups.append(family.samples[0].value)

    pool = [threading.Thread(target=one) for _ in range(30)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(30)
    assert ups == [1.0] * 30 and len(reads) == 1
