"""A network that silently stops carrying leasectl's connections: a proxy
that stops forwarding existing flows, resetting nothing, while new connections go through.
The worker reconnects and works on; the console says the database is unreachable, and quits."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from leasectl.console.source import POLL_CALL_BOUND_S, QUIT_TIMEOUT_S
from leasectl.core.errors import ConnectionFailed
from leasectl.db.connection import Database
from leasectl.runtime.worker import CALL_BOUND_S, Worker, WorkerConfig
from tests.integration.test_cli import _env
from tests.integration.test_terminal import gone, leasectl, terminal
from tests.proxy import StallingProxy, stalling_proxy
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.full, pytest.mark.serial]

SCHEMA = "leasectl"


@pytest.fixture
def proxy(db_dsn: str) -> Iterator[StallingProxy]:
    with stalling_proxy(db_dsn) as made:
        yield made


def test_a_worker_whose_connections_go_silent_reconnects_and_completes_new_jobs(
    store: Stores, proxy: StallingProxy, db_dsn: str
) -> None:
    done: list[int] = []
    config = WorkerConfig(
        queues=("q",),
        lease_ttl=timedelta(seconds=30),  # the default: the bound is CALL_BOUND_S
        poll_interval=timedelta(milliseconds=200),
    )
    worker = Worker(proxy.dsn(db_dsn), SCHEMA, config, lambda ctx: done.append(ctx.job.id))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        assert worker.started.wait(10)
        store.ops.enqueue([{}], queue="q")
        wait_until(lambda: len(done) == 1, what="the first job done")
        assert proxy.stall() > 0
        stalled_at = time.monotonic()
        (second,) = store.ops.enqueue([{}], queue="q")
        wait_until(lambda: second in done, timeout=60, what="a job enqueued after the stall done")
        took = time.monotonic() - stalled_at
        assert took < CALL_BOUND_S + 15, took
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_call_past_its_bound_fails_as_a_lost_connection(
    proxy: StallingProxy, db_dsn: str
) -> None:
    with Database.connect(proxy.dsn(db_dsn), SCHEMA, max_size=1, call_bound=1.0) as db:
        db.server_info()
        proxy.stall()
        started = time.monotonic()
        with pytest.raises(ConnectionFailed, match="lost the database"):
            db.server_info()
        assert time.monotonic() - started < 5
        # The pool replaces the cut connection: a new flow, which the proxy carries.
        wait_until(lambda: _answers(db), timeout=20, what="a new connection answering")


def _answers(db: Database) -> Any:
    try:
        return db.server_info()
    except ConnectionFailed:
        return None


def test_the_console_says_unreachable_within_a_refresh_and_its_bound_and_quits_at_once(
    db_dsn: str, proxy: StallingProxy
) -> None:
    with terminal(leasectl("tui", "--refresh", "1s"), _env(proxy.dsn(db_dsn))) as term:
        term.wait_for(b"connected")
        proxy.stall()  # new connections still go through
        stalled_at = time.monotonic()
        term.wait_for(b"DATABASE UNREACHABLE")
        took = time.monotonic() - stalled_at
        assert took < 1 + POLL_CALL_BOUND_S + 5, took
        # Now nothing answers, old flows or new: a call of the console waits, and `q` is typed.
        proxy.stall(new_too=True)
        wait_until(lambda: proxy.waiting() > 0, what="a console call waiting for the server")
        os.write(term.master, b"q")
        typed_at = time.monotonic()
        wait_until(lambda: gone(term), timeout=10, what="the console to exit")
        took = time.monotonic() - typed_at
        assert took < QUIT_TIMEOUT_S + 0.5, took
        assert term.proc.returncode == 0


def test_abort_ends_a_call_without_a_bound_at_once(proxy: StallingProxy, db_dsn: str) -> None:
    """What `q` relies on: a database's calls under way end when it is aborted."""
    with Database.connect(proxy.dsn(db_dsn), SCHEMA, max_size=1) as db:
        db.server_info()
        proxy.stall()
        failed: list[BaseException] = []

        def call() -> None:
            try:
                db.server_info()
            except ConnectionFailed as exc:
                failed.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        wait_until(lambda: proxy.waiting() > 0, what="the call waiting for the server")
        started = time.monotonic()
        db.abort()
        caller.join(5)
        assert not caller.is_alive() and failed
        assert time.monotonic() - started < 2
