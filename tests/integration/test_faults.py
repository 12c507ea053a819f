"""Connection faults: the server restarts, goes away, or drops a reply after committing.

These tests own a throwaway embedded server (never the session's), so that they can restart it.
It runs with synchronous_commit on, so that an immediate shutdown loses no acknowledged commit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from leasectl.console.source import DatabaseSource
from leasectl.console.view import ConsoleFilter
from leasectl.core.errors import ConnectionFailed
from leasectl.core.models import JobStatus
from leasectl.db.embedded import EmbeddedServer
from leasectl.runtime.watcher import Watcher, WatcherConfig
from leasectl.runtime.worker import JobContext, Worker, WorkerConfig, worker_store
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.full]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer.temporary()
    srv.start()
    try:
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_commit = on")
            conn.execute("SELECT pg_reload_conf()")
        yield srv
    finally:
        srv.stop(remove=True)


@pytest.fixture
def dsn(server: EmbeddedServer) -> Iterator[str]:
    name = f"faults_{uuid.uuid4().hex[:10]}"
    if not server.is_running():
        server.start()
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    db = conninfo.make_conninfo(server.dsn(), dbname=name)
    with Stores.connect(db, "leasectl", check_schema=False) as store:
        store.db.migrate()
    try:
        yield db
    finally:
        if not server.is_running():
            server.start()
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(worker.started.is_set, what="the worker to start")
        yield worker
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive(), "the worker did not stop"


@contextlib.contextmanager
def watching(store: Stores, interval: float = 0.2) -> Iterator[Watcher]:
    watcher = Watcher(
        store.ops, WatcherConfig(interval=timedelta(seconds=interval), actor="watcher@t")
    )
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        watcher.stop()
        thread.join(60)


def config(**kw: Any) -> WorkerConfig:
    settings: dict[str, Any] = {
        "queues": ("q",),
        "lease_ttl": timedelta(seconds=2),
        "heartbeat_every": timedelta(milliseconds=300),
        "poll_interval": timedelta(milliseconds=50),
        "grace": timedelta(seconds=1),
        "worker_id": f"w-{uuid.uuid4().hex[:6]}",
    }
    settings.update(kw)
    return WorkerConfig(**settings)


def statuses(dsn: str) -> dict[int, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return dict(conn.execute("SELECT id, status::text FROM leasectl.jobs").fetchall())


def attempts(dsn: str, job_id: int) -> list[tuple[int, str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT attempt, outcome::text FROM leasectl.job_attempts WHERE job_id = %s "
            "ORDER BY attempt",
            (job_id,),
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def eventually(fn: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """Call fn until it stops raising ConnectionFailed (the caller's retry after a lost server)."""

    def attempt() -> Any:
        try:
            return (fn(),)
        except ConnectionFailed:
            return None

    return wait_until(attempt, timeout=timeout, interval=0.1, what=what)[0]


# -- the server restarts under a running fleet --------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_worker_watcher_and_console_survive_a_server_restart(
    server: EmbeddedServer, dsn: str, mode: str
) -> None:
    store = Stores.connect(dsn, "leasectl", pool_timeout=2)
    watcher_store = Stores.connect(dsn, "leasectl", pool_timeout=2)
    source = DatabaseSource.connect(dsn, "leasectl")
    try:
        first = store.ops.enqueue([{}] * 10, queue="q")
        worker = Worker(dsn, "leasectl", config(), lambda ctx: None)
        with running(worker), watching(watcher_store) as watcher:
            wait_until(lambda: set(statuses(dsn).values()) == {"Completed"}, what="first batch")
            assert source.snapshot(ConsoleFilter(), 10).counts.pending == 0

            server.restart(mode=mode)

            # Every component finds the server again by itself; a caller may see one error.
            second = eventually(lambda: store.ops.enqueue([{}] * 10, queue="q"), "enqueue again")
            wait_until(
                lambda: all(statuses(dsn)[i] == "Completed" for i in second),
                what="the worker to finish jobs enqueued after the restart",
            )
            snap = eventually(lambda: source.snapshot(ConsoleFilter(), 10), "a console refresh")
            assert snap.counts.pending == 0 and snap.counts.processing == 0
            assert eventually(lambda: store.ops.status(), "status").queues[0].completed_recent == 20
            # The watcher still works: a lease that lapses after the restart is requeued by it.
            [ghost] = store.ops.enqueue([{}], queue="ghosts")
            store.work.claim("ghosts", "ghost-owner", timedelta(seconds=30))
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "UPDATE leasectl.jobs SET lease_until = now() - interval '1 second' "
                    "WHERE id = %s",
                    (ghost,),
                )
            wait_until(lambda: statuses(dsn)[ghost] == "Pending", what="the watcher to requeue")
            assert watcher.moved >= 1
        assert worker.stats.completed == len(first) + len(second)
        assert worker.stats.lost == 0
    finally:
        source.close()
        watcher_store.close()
        store.close()


# -- the server goes away -----------------------------------------------------------------------


class Blocker:
    """A handler that holds its first lease until cancelled and finishes later ones at once."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled_at: float | None = None
        self.deadline_at_cancel: float | None = None
        self.calls: list[int] = []

    def __call__(self, ctx: JobContext) -> None:
        self.calls.append(ctx.lease.attempt)
        if ctx.lease.attempt > 1:
            return
        self.started.set()
        if ctx.cancelled.wait(60):
            self.cancelled_at = time.monotonic()
            self.deadline_at_cancel = ctx.deadline
            raise RuntimeError("cancelled: the lease is presumed lost")


def test_worker_offline_presumes_its_lease_lost_then_recovers(
    server: EmbeddedServer, dsn: str
) -> None:
    with Stores.connect(dsn, "leasectl") as store:
        [job_id] = store.ops.enqueue([{}], queue="q")
    handler = Blocker()
    cfg = config(lease_ttl=timedelta(milliseconds=1500))
    work = worker_store(dsn, "leasectl", cfg)
    worker = Worker(dsn, "leasectl", cfg, handler, store=work)
    with contextlib.closing(work), running(worker):
        assert handler.started.wait(20)
        server.stop(mode="immediate")
        try:
            wait_until(
                lambda: handler.cancelled_at is not None,
                timeout=40,
                what="the handler to be told its lease is lost",
            )
            assert worker.stats.lost == 1
        finally:
            server.start()
        # The lapsed lease is taken over (by this same worker, as a new attempt) and finished.
        wait_until(lambda: statuses(dsn)[job_id] == "Completed", what="the job to complete")
    assert attempts(dsn, job_id) == [(1, "expired"), (2, "completed")]
    assert handler.calls == [1, 2]


def test_worker_offline_cancels_the_handler_by_its_lease_deadline(
    server: EmbeddedServer, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler learns that its lease is presumed lost from the lease's own deadline, not
    from a database call: a heartbeat stuck on the network (held here until the test lets it
    go) must not keep the handler from being told once the lease has lapsed. No clock is read
    by the test: it checks that the cancel came while that heartbeat was still in flight, and
    not before the deadline the worker gave the handler."""
    with Stores.connect(dsn, "leasectl") as store:
        store.ops.enqueue([{}], queue="q")
    handler = Blocker()
    cfg = config(lease_ttl=timedelta(milliseconds=1500))
    work = worker_store(dsn, "leasectl", cfg)
    in_flight, let_go, returned = threading.Event(), threading.Event(), threading.Event()
    hold = threading.Event()
    heartbeat = work.heartbeat

    def stuck_heartbeat(*args: Any, **kwargs: Any) -> Any:
        if hold.is_set():
            in_flight.set()
            let_go.wait(60)
            returned.set()
        return heartbeat(*args, **kwargs)

    monkeypatch.setattr(work, "heartbeat", stuck_heartbeat)
    worker = Worker(dsn, "leasectl", cfg, handler, store=work)
    with contextlib.closing(work), running(worker):
        assert handler.started.wait(20)
        hold.set()
        try:
            wait_until(in_flight.is_set, what="a heartbeat to be stuck in flight")
            server.stop(mode="immediate")
            wait_until(
                lambda: handler.cancelled_at is not None,
                timeout=40,
                what="the handler to be cancelled by its lease deadline",
            )
            assert not returned.is_set(), "the cancel waited for the stuck heartbeat"
            assert handler.deadline_at_cancel is not None and handler.cancelled_at is not None
            assert handler.cancelled_at >= handler.deadline_at_cancel, "cancelled too early"
        finally:
            let_go.set()
            server.start()


def cli_worker(dsn: str, log: Path, handler: str, *args: str) -> subprocess.Popen[bytes]:
    """A `leasectl worker` process on queue q, with this module's lease settings."""
    with log.open("w") as out:
        return subprocess.Popen(
            [
                sys.executable, "-m", "leasectl", "worker",
                "--queue", "q", "--handler", handler, "--lease-ttl", "1500ms",
                "--heartbeat-every", "300ms", "--poll-interval", "50ms", "--grace", "1s",
                *args,
            ],
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, "LEASECTL_DSN": dsn, "LEASECTL_SCHEMA": "leasectl"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def test_the_leasectl_worker_command_cancels_at_the_lease_deadline_and_recovers(
    server: EmbeddedServer, dsn: str, tmp_path: Path
) -> None:
    """The same outage on the path users run: a `leasectl worker` process. With the server
    stopped mid-lease, the handler is told by the lease deadline (while the server is still
    down, and well within the CLI's former 10 s pool timeout), and once the server is back
    the worker takes the lapsed job over as a new attempt and goes on."""
    with Stores.connect(dsn, "leasectl") as store:
        [job_id] = store.ops.enqueue([{"dir": str(tmp_path)}], queue="q")
    ready, log = tmp_path / "ready", tmp_path / "worker.log"
    proc = cli_worker(dsn, log, "tests.handlers:hold_until_lost", "--ready-file", str(ready))
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, what="the worker to start")
        wait_until(lambda: (tmp_path / "started").exists(), what="the handler to start")
        server.stop(mode="immediate")
        try:
            wait_until(
                lambda: (tmp_path / "cancelled").exists() or proc.poll() is not None,
                timeout=40,
                what="the handler to be told its lease is lost",
            )
            assert not server.is_running()
            assert proc.poll() is None, log.read_text()
            cancelled_at, deadline = map(float, (tmp_path / "cancelled").read_text().split())
            assert deadline <= cancelled_at < deadline + 10, "not cancelled by the lease deadline"
        finally:
            server.start()
        wait_until(lambda: statuses(dsn)[job_id] == "Completed", what="the job to complete")
        assert attempts(dsn, job_id) == [(1, "expired"), (2, "completed")]
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "could not heartbeat" in log.read_text() or "no heartbeat" in log.read_text()


def test_the_leasectl_worker_command_waits_for_the_server_with_start_retry(
    server: EmbeddedServer, dsn: str, tmp_path: Path
) -> None:
    """Without --start-retry a worker whose server is down exits 1 at once; with it, the worker
    keeps trying, and is ready (registered and listening) and working once the server is up."""
    server.stop(mode="fast")
    try:
        impatient = cli_worker(dsn, tmp_path / "impatient.log", "tests.handlers:noop")
        assert impatient.wait(60) == 1
        lines = (tmp_path / "impatient.log").read_text().splitlines()
        assert len(lines) == 1 and "cannot connect" in lines[0], lines
        ready, log = tmp_path / "ready", tmp_path / "patient.log"
        proc = cli_worker(
            dsn, log, "tests.handlers:noop", "--start-retry", "60s", "--ready-file", str(ready)
        )
        wait_until(
            lambda: "cannot start yet" in log.read_text() or proc.poll() is not None,
            what="the worker to try and wait",
        )
        assert proc.poll() is None and not ready.exists(), log.read_text()
    finally:
        server.start()
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, what="the worker to start")
        assert proc.poll() is None, log.read_text()
        with Stores.connect(dsn, "leasectl") as store:
            [job_id] = store.ops.enqueue([{}], queue="q")
        wait_until(lambda: statuses(dsn)[job_id] == "Completed", what="the job to complete")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
        assert not ready.exists(), "the ready file outlived the worker"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# -- a reply lost after the commit ---------------------------------------------------------------


class ReplyEater:
    """A TCP proxy in front of PostgreSQL that, once armed with a pattern, lets the statement whose
    text contains it through to the server and then cuts the connection before the reply: the
    statement commits, the client sees a lost connection (the outcome is unknown to it)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port: int = self.listener.getsockname()[1]
        self.armed: bytes | None = None
        self.eaten = 0
        self.closing = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.sockets: list[socket.socket] = []
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            doomed = threading.Event()
            self._spawn(self._pump, client, server, doomed, True)
            self._spawn(self._pump, server, client, doomed, False)

    def _pump(
        self, src: socket.socket, dst: socket.socket, doomed: threading.Event, upstream: bool
    ) -> None:
        try:
            while data := src.recv(65536):
                if upstream:
                    with self.lock:
                        if self.armed is not None and self.armed in data:
                            self.armed = None
                            doomed.set()
                elif doomed.is_set():
                    # The statement ran; its reply never reaches the client.
                    self.eaten += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def dsn(self, dsn: str) -> str:
        return conninfo.make_conninfo(dsn, host="127.0.0.1", port=self.port, sslmode="disable")

    def close(self) -> None:
        self.closing.set()
        self.listener.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for thread in self.threads:
            thread.join(5)


@pytest.fixture
def eater(server: EmbeddedServer) -> Iterator[ReplyEater]:
    proxy = ReplyEater("127.0.0.1", server.port)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_retried_completion_whose_commit_was_not_acknowledged_applies_once(
    dsn: str, eater: ReplyEater
) -> None:
    with Stores.connect(dsn, "leasectl") as store:
        [job_id] = store.ops.enqueue([{}], queue="q")
    handled: list[int] = []

    def handler(ctx: JobContext) -> None:
        handled.append(ctx.lease.attempt)
        # The worker's next round trip carries the completion: it loses its reply. (The
        # round trip's statement was prepared on the first one: it goes by name.)
        eater.armed = b"leasectl_jobs_complete_and_claim"

    worker = Worker(eater.dsn(dsn), "leasectl", config(), handler)
    with running(worker):
        wait_until(lambda: eater.eaten == 1, what="the completion's reply to be eaten")
        wait_until(lambda: not worker.held(), what="the worker to settle the job")
    assert handled == [1]
    assert statuses(dsn)[job_id] == "Completed"
    assert attempts(dsn, job_id) == [(1, "completed")]
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT j.finished_at = a.ended_at, j.attempts FROM leasectl.jobs AS j "
            "JOIN leasectl.job_attempts AS a ON a.job_id = j.id WHERE j.id = %s",
            (job_id,),
        ).fetchone()
    assert row == (True, 1)  # the retry changed nothing: same finish time, no new attempt


def test_a_retried_failure_whose_commit_was_not_acknowledged_applies_once(
    dsn: str, eater: ReplyEater
) -> None:
    with Stores.connect(dsn, "leasectl") as store:
        [job_id] = store.ops.enqueue([{}], queue="q", max_attempts=3)

    def handler(ctx: JobContext) -> None:
        eater.armed = b"ELSE 'Failed'"  # the worker's failure report loses its reply
        raise RuntimeError("handler failed")

    cfg = config(retry_base=timedelta(minutes=10))  # the retry stays in the future
    worker = Worker(eater.dsn(dsn), "leasectl", cfg, handler)
    with running(worker):
        wait_until(lambda: eater.eaten == 1, what="the failure's reply to be eaten")
        wait_until(lambda: not worker.held(), what="the worker to settle the job")
    with Stores.connect(dsn, "leasectl") as store:
        job = store.ops.get_job(job_id)
    assert (job.status, job.attempts) == (JobStatus.PENDING, 1)
    assert "handler failed" in (job.last_error or "")
    assert attempts(dsn, job_id) == [(1, "failed")]


def test_fenced_writes_are_idempotent_under_retry(dsn: str) -> None:
    """What makes retrying them safe: a second identical complete/fail/release changes nothing."""
    with Stores.connect(dsn, "leasectl") as store:
        a, b, c = store.ops.enqueue([{}] * 3, queue="q")
        leases = {x.job_id: x for x in store.work.claim("q", "w", timedelta(seconds=30), 3)}
        assert store.work.complete([leases[a]]) == {a}
        assert (
            store.work.fail(leases[b], "x", retry_delay=timedelta(minutes=5)) == JobStatus.PENDING
        )
        assert store.work.release([leases[c]]) == {c}
        with psycopg.connect(dsn, autocommit=True) as conn:

            def state() -> list[Any]:
                return conn.execute(
                    "SELECT to_jsonb(j) FROM leasectl.jobs j UNION ALL "
                    "SELECT to_jsonb(a) FROM leasectl.job_attempts a"
                ).fetchall()

            before = state()
            assert store.work.complete([leases[a]]) == set()
            assert store.work.fail(leases[b], "x", retry_delay=timedelta(0)) is None
            assert store.work.release([leases[c]]) == set()
            assert store.work.heartbeat(list(leases.values()), timedelta(seconds=30)) == {}
            assert state() == before


# -- no false alarms ------------------------------------------------------------------------------


def test_a_worker_that_finishes_its_own_jobs_never_reports_a_lease_lost(dsn: str) -> None:
    with Stores.connect(dsn, "leasectl") as store:
        ids = store.ops.enqueue([{}] * 300, queue="q")
    cfg = config(
        concurrency=4,
        lease_ttl=timedelta(seconds=30),
        heartbeat_every=timedelta(milliseconds=5),
        poll_interval=timedelta(milliseconds=10),
    )
    worker = Worker(dsn, "leasectl", cfg, lambda ctx: time.sleep(0.002))
    with running(worker):
        wait_until(
            lambda: all(statuses(dsn)[i] == "Completed" for i in ids),
            timeout=60,
            what="every job to complete",
        )
    # Nothing expired and nobody else worked this queue: no lease can have been lost.
    with psycopg.connect(dsn, autocommit=True) as conn:
        outcomes = conn.execute(
            "SELECT outcome::text, count(*) FROM leasectl.job_attempts GROUP BY 1"
        ).fetchall()
    assert outcomes == [("completed", 300)]
    assert (worker.stats.completed, worker.stats.lost) == (300, 0), worker.stats


def test_completions_are_reported_when_taking_over_lapsed_leases_fails(
    store: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round trip is two statements when Pending work runs short; if the second (taking over
    lapsed leases) loses the connection, the completions the first committed are still reported
    as accepted, not raised as a failed round trip (whose retry would be refused and the jobs
    reported lost)."""
    a, b = store.ops.enqueue([{}, {}], queue="q")
    held = store.work.claim("q", "w", timedelta(minutes=5), 2)
    hot = store.work._hot

    def connection_lost_on_takeover(name: str, params: dict[str, Any]) -> Any:
        if name == "jobs_claim_expired":
            raise ConnectionFailed("lost the database (test)")
        return hot(name, params)

    monkeypatch.setattr(store.work, "_hot", connection_lost_on_takeover)
    claimed, refused = store.work.complete_and_claim(held, "q", "w", timedelta(minutes=5), 5)
    assert (claimed, refused) == ([], set())
    assert {store.ops.get_job(a).status, store.ops.get_job(b).status} == {JobStatus.COMPLETED}
