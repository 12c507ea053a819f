"""Chaos soak: real worker processes, SIGKILL, SIGSTOP past the lease, server restarts.

Usage::

    python -m bench.chaos [--workers 6] [--jobs 20000] [--duration 10m] [--dsn DSN] [--seed N]
    python -m bench.chaos --failover sync|async [--failovers 2] [--duration 60s] ...

Without ``--dsn`` it runs a durable embedded PostgreSQL in a temporary directory it owns (and
removes, unless ``--keep`` or a violation), and restarts it (fast, immediate, and SIGKILL of the
postmaster) while everything runs. With ``--dsn`` it works in a fresh schema of that database
and cannot restart the server. With ``--failover`` it runs a primary and a standby instead,
everyone on one multi-host DSN, and fails over ``--failovers`` times (bench/failover.py): with
``sync`` every invariant must hold; with ``async`` the report says which ones a failover broke
(only those that ``ASYNC_MAY_BREAK`` lists may break).

Every execution of the handler is recorded (job, attempt, worker, start and end on the database
clock) in an append-only table, committed before the handler returns. After the chaos the queue
is drained and the invariants (``Chaos.check``, listed in RELIABILITY.md) are checked against
``jobs``, ``job_attempts``, ``job_events`` and the executions; the exit code is 1 on any
violation.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.failover import ASYNC_MAY_BREAK, LEDGER_ENV, Replicas, ledger_checks
from leasectl.core.config import parse_duration
from leasectl.core.errors import ConnectionFailed, LeasectlError
from leasectl.core.models import JobStatus, SeenState
from leasectl.db.connection import Database
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.replication import replicated_pair
from leasectl.db.operations import Operations
from leasectl.runtime.watcher import Watcher, WatcherConfig

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "chaos"
WATCHER = "watcher@chaos"
OPERATOR = "operator:chaos"
MAX_ATTEMPTS = 1000  # attempts are burned by kills and takeovers; the budget is not under test

log = logging.getLogger("chaos")


@dataclass(frozen=True)
class Settings:
    workers: int = 6
    jobs: int = 20_000
    duration: float = 600.0
    dsn: str | None = None
    seed: int = 0
    concurrency: int = 4
    lease_ttl: float = 2.0
    heartbeat: float = 0.5
    watch_interval: float = 0.5
    mean_job_ms: float = 20.0
    long_fraction: float = 0.02  # jobs that outlive their first lease: heartbeats must carry them
    stubborn_fraction: float = 0.05  # handlers that ignore ctx.cancelled: only fencing stops them
    fail_fraction: float = 0.01  # handlers that raise on their first attempt
    # Jobs whose handler writes a business row and completes in one transaction
    # (ctx.transaction()); the others complete on the worker's round trip.
    transaction_fraction: float = 0.5
    action_gap: float | None = None  # mean seconds between chaos actions (default: from duration)
    drain_timeout: float = 300.0
    keep: bool = False
    failover: str | None = None  # "sync" or "async": a replicated pair, failed over
    failovers: int = 2
    lag: float = 0.5  # seconds the standby falls behind before each failover's kill
    async_handlers: bool = False  # the workers run handle_async (tasks of an event loop)

    @property
    def gap(self) -> float:
        if self.action_gap is not None:
            return self.action_gap
        return min(5.0, max(1.0, self.duration / 120))


@dataclass
class Tally:
    kills: int = 0
    terms: int = 0
    stops: int = 0
    longest_stop_s: float = 0.0
    worker_starts: int = 0
    restarts: Counter[str] = field(default_factory=Counter)
    longest_outage_s: float = 0.0
    operator_calls: int = 0
    operator_changed: int = 0
    operator_unknown: int = 0  # calls whose outcome is unknown (connection lost)
    operator_max_ids: int = 0
    watcher_failed_passes: int = 0
    actions: Counter[str] = field(default_factory=Counter)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    sample: list[Any] = field(default_factory=list)


@dataclass
class Report:
    settings: dict[str, Any]
    tally: dict[str, Any]
    counts: dict[str, Any]
    checks: list[Check]
    elapsed_s: float

    @property
    def violations(self) -> list[Check]:
        """The checks that failed and had to hold: under asynchronous replication, those a
        failover may break (``ASYNC_MAY_BREAK``) are reported, not counted."""
        tolerated = ASYNC_MAY_BREAK if self.settings.get("failover") == "async" else frozenset()
        return [c for c in self.checks if not c.ok and c.name not in tolerated]

    @property
    def broken_by_async(self) -> list[Check]:
        if self.settings.get("failover") != "async":
            return []
        return [c for c in self.checks if not c.ok and c.name in ASYNC_MAY_BREAK]

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "tally": self.tally,
            "counts": self.counts,
            "checks": [asdict(c) for c in self.checks],
            "violations": len(self.violations),
            "broken_by_async_failover": [c.name for c in self.broken_by_async],
            "elapsed_s": self.elapsed_s,
        }


# -- worker processes ---------------------------------------------------------------------------


class Slot:
    """One worker position; each (re)start is a new process with a new worker id."""

    def __init__(self, index: int, chaos: Chaos) -> None:
        self.index = index
        self.chaos = chaos
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.ready_path: Path | None = None
        self.stopped_at: float | None = None  # SIGSTOP time while stopped
        self.expect_exit: str | None = None  # "kill" or "term" when we ended it
        self.logs: list[Path] = []

    @property
    def worker_id(self) -> str:
        return f"chaos-w{self.index}-g{self.generation}"

    def start(self) -> None:
        self.generation += 1
        self.log_path = self.chaos.workdir / f"{self.worker_id}.log"
        self.logs.append(self.log_path)
        s = self.chaos.settings
        self.ready_path = self.log_path.with_suffix(".ready")
        env = {**os.environ, "LEASECTL_DSN": self.chaos.dsn, "LEASECTL_SCHEMA": self.chaos.schema}
        if self.chaos.replicas is not None:
            env[LEDGER_ENV] = str(self.chaos.workdir)
        handler = "handle_async" if s.async_handlers else "handle"
        with self.log_path.open("wb") as out:
            # The command users run; the server may be restarting while it starts (--start-retry).
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "leasectl", "worker",
                    "--queue", QUEUE, "--handler", f"bench.chaos_handlers:{handler}",
                    "--worker-id", self.worker_id, "--concurrency", str(s.concurrency),
                    "--lease-ttl", f"{s.lease_ttl}s", "--heartbeat-every", f"{s.heartbeat}s",
                    "--grace", "1s", "--poll-interval", "100ms",
                    "--start-retry", "1h", "--ready-file", str(self.ready_path),
                ],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.expect_exit = None
        self.stopped_at = None
        self.chaos.tally.worker_starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def ready(self) -> bool:
        if not self.alive or self.log_path is None:
            return False
        return self.ready_path is not None and self.ready_path.exists()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)


# -- the controller -----------------------------------------------------------------------------


class Chaos:
    def __init__(
        self,
        settings: Settings,
        dsn: str,
        schema: str,
        workdir: Path,
        server: EmbeddedServer | None,
        replicas: Replicas | None = None,
    ) -> None:
        self.settings = settings
        self.replicas = replicas
        self.dsn = dsn
        self.schema = schema
        self.workdir = workdir
        self.server = server
        self.rng = random.Random(settings.seed)
        self.tally = Tally()
        self.slots = [Slot(i, self) for i in range(settings.workers)]
        self.events: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.server_down = False
        self.problems: list[str] = []  # violations seen while running (crashes, bad exits)
        self.t0 = time.monotonic()
        self._conn: psycopg.Connection[Any] | None = None
        self.ident = sql.Identifier(schema)

    # -- plumbing -------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        print(f"[{self.elapsed():7.1f}s] {text}", flush=True)

    def at(self, delay: float, what: str, fn: Callable[[], None]) -> None:
        heapq.heappush(self.events, (time.monotonic() + delay, next(self._seq), what, fn))

    def q(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """A read (or an idempotent write) on the controller's own connection, retried."""
        deadline = time.monotonic() + 60
        while True:
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3)
                cur = self._conn.execute(sql.SQL(query).format(s=self.ident), params)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # -- setup ----------------------------------------------------------------------------------

    def setup(self) -> None:
        s = self.settings
        with Database.connect(self.dsn, self.schema, check_schema=False) as db:
            db.migrate()
        self.q(
            "CREATE TABLE {s}.chaos_executions ("
            " key uuid PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL,"
            " worker text NOT NULL, started_at timestamptz NOT NULL,"
            " ended_at timestamptz NOT NULL, outcome text NOT NULL)"
        )
        # The business rows written in ctx.transaction(): no key, so a double write would show.
        self.q(
            "CREATE TABLE {s}.chaos_business ("
            " job_id bigint NOT NULL, attempt integer NOT NULL, worker text NOT NULL)"
        )
        # Append-only: a trigger refuses every UPDATE and DELETE.
        self.q(
            "CREATE FUNCTION {s}.chaos_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'chaos_executions is append-only'; END$$"
        )
        self.q(
            "CREATE TRIGGER chaos_append_only BEFORE UPDATE OR DELETE ON {s}.chaos_executions "
            "FOR EACH STATEMENT EXECUTE FUNCTION {s}.chaos_append_only()"
        )
        # Due times spread over the first 85% of the run, so that jobs flow while chaos happens.
        chunks = min(200, s.jobs)
        spread = 0.85 * s.duration
        made = 0
        with Database.connect(self.dsn, self.schema) as db:
            producer = Operations(db)
            for c in range(chunks):
                n = s.jobs * (c + 1) // chunks - made
                payloads = [self._payload(made + i) for i in range(n)]
                producer.enqueue(
                    payloads,
                    queue=QUEUE,
                    delay=timedelta(seconds=spread * c / chunks),
                    max_attempts=MAX_ATTEMPTS,
                )
                made += n
        self.say(f"enqueued {made} jobs due over {spread:.0f}s")

    def _payload(self, n: int) -> dict[str, Any]:
        s = self.settings
        r = self.rng
        if r.random() < s.long_fraction:
            ms = s.lease_ttl * 1000 * r.uniform(1.3, 2.5)
        else:
            ms = r.expovariate(1 / s.mean_job_ms)
        return {
            "n": n,
            "ms": round(ms, 1),
            "stubborn": r.random() < s.stubborn_fraction,
            "fail": r.random() < s.fail_fraction,
            "tx": r.random() < s.transaction_fraction,
        }

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> Report:
        s = self.settings
        self.t0 = time.monotonic()
        self.setup()
        watcher_store = Operations(Database.connect(self.dsn, self.schema, pool_timeout=2))
        operator_store = Operations(Database.connect(self.dsn, self.schema, pool_timeout=2))
        watcher = Watcher(
            watcher_store,
            WatcherConfig(interval=timedelta(seconds=s.watch_interval), actor=WATCHER),
        )
        counter = _WatcherFailures()
        watcher_log = logging.getLogger("leasectl.watcher")
        watcher_log.addHandler(counter)
        watcher_log.propagate = False  # its retries are counted, not printed
        thread = threading.Thread(target=watcher.run, name="chaos-watcher", daemon=True)
        thread.start()
        try:
            for slot in self.slots:
                slot.start()
            self.chaos_phase(operator_store)
            self.drain(operator_store)
            self.stop_workers()
        finally:
            for slot in self.slots:
                slot.signal(signal.SIGCONT)
                slot.signal(signal.SIGKILL)
                if slot.proc is not None:
                    slot.proc.wait()
            watcher.stop()
            thread.join(30)
            watcher_log.removeHandler(counter)
            watcher_log.propagate = True
            watcher_store.db.close()
            operator_store.db.close()
        self.tally.watcher_failed_passes = counter.failures
        report = self.check(watcher.moved)
        if self._conn is not None:
            self._conn.close()
        return report

    def chaos_phase(self, operator_store: Operations) -> None:
        s = self.settings
        end = time.monotonic() + s.duration
        # The guaranteed ones, spread over the run; random ones come on top.
        self.at(s.duration * 0.10, "kill", self.kill_one)
        self.at(s.duration * 0.20, "stop", self.stop_one)
        if self.server is not None:
            self.at(s.duration * 0.35, "restart fast", lambda: self.restart_server("fast"))
            self.at(
                s.duration * 0.65, "restart immediate", lambda: self.restart_server("immediate")
            )
        elif self.replicas is not None:
            n = s.failovers
            for i in range(n):
                self.at(s.duration * (i + 1) / (n + 1), "failover", self.fail_over)
        else:
            self.say("external server: no server restarts")
        next_action = time.monotonic() + self.rng.uniform(0.5, 1.5) * s.gap
        last_progress = 0.0
        while time.monotonic() < end:
            self.reap()
            self.run_due()
            now = time.monotonic()
            if now >= next_action:
                self.random_action(operator_store)
                next_action = time.monotonic() + self.rng.uniform(0.5, 1.5) * s.gap
            if now - last_progress > max(5.0, s.duration / 20) and not self.server_down:
                last_progress = now
                self.progress()
            time.sleep(0.05)
        # Let every deferred action (SIGCONT, worker restarts, server start) happen now.
        while self.events:
            _, _, what, fn = heapq.heappop(self.events)
            if what.startswith(("cont", "start", "server up", "unquarantine", "promote")):
                fn()
        self.events.clear()
        self.reap()

    def progress(self) -> None:
        rows = self.q("SELECT status::text, count(*) FROM {s}.jobs GROUP BY 1 ORDER BY 1")
        self.say("jobs: " + ", ".join(f"{k} {v}" for k, v in rows))

    def run_due(self) -> None:
        while self.events and self.events[0][0] <= time.monotonic():
            _, _, _, fn = heapq.heappop(self.events)
            fn()

    def reap(self) -> None:
        """Restart workers that died; a death we did not cause is a violation."""
        for slot in self.slots:
            if slot.proc is None or slot.proc.poll() is None:
                continue
            code = slot.proc.returncode
            if slot.expect_exit == "kill":
                pass
            elif slot.expect_exit == "term":
                if code != 0:
                    self.problems.append(f"{slot.worker_id} exited {code} after SIGTERM")
            else:
                tail = _tail(slot.log_path)
                self.problems.append(f"{slot.worker_id} died on its own (exit {code}): {tail}")
                self.say(f"VIOLATION: {slot.worker_id} died on its own (exit {code})")
            slot.proc = None
            self.at(self.rng.uniform(0.2, 1.5), f"start w{slot.index}", slot.start)

    # -- actions --------------------------------------------------------------------------------

    def random_action(self, operator_store: Operations) -> None:
        choices: list[tuple[str, float, Callable[[], None]]] = [
            ("kill", 3, self.kill_one),
            ("term", 1, self.term_one),
            ("stop", 2, self.stop_one),
            ("operator", 2, lambda: self.operator_action(operator_store)),
        ]
        if self.server is not None and not self.server_down:
            choices.append(("server", 0.6, self.random_restart))
        names, weights, fns = zip(*choices, strict=True)
        i = self.rng.choices(range(len(names)), weights=weights)[0]
        fns[i]()

    def _pick(self, *, ready: bool = True, ending: bool = True) -> Slot | None:
        """A live worker to act on; ``ending=False`` leaves out those already told to stop."""
        live = [
            s
            for s in self.slots
            if s.alive
            and s.stopped_at is None
            and (s.ready or not ready)
            and (ending or s.expect_exit is None)
        ]
        return self.rng.choice(live) if live else None

    def kill_one(self) -> None:
        slot = self._pick(ready=False)
        if slot is None:
            return
        slot.expect_exit = "kill"
        slot.signal(signal.SIGKILL)
        self.tally.kills += 1
        self.tally.actions["kill"] += 1
        self.say(f"SIGKILL {slot.worker_id}")

    def term_one(self) -> None:
        # Not one already stopping: a second SIGTERM can land while the exiting interpreter
        # has put the default handler back (Python does so at finalization), and kill it with
        # -15. A supervisor sends SIGTERM once, then SIGKILL (kill_one still picks those).
        slot = self._pick(ending=False)
        if slot is None:
            return
        slot.expect_exit = "term"
        slot.signal(signal.SIGTERM)
        self.tally.terms += 1
        self.tally.actions["term"] += 1
        self.say(f"SIGTERM {slot.worker_id}")

    def stop_one(self) -> None:
        if any(s.stopped_at is not None for s in self.slots):
            return  # one zombie at a time
        slot = self._pick()
        if slot is None:
            return
        slot.signal(signal.SIGSTOP)
        slot.stopped_at = time.monotonic()
        pause = self.settings.lease_ttl * self.rng.uniform(1.5, 3.0)
        self.tally.stops += 1
        self.tally.actions["stop"] += 1
        self.say(
            f"SIGSTOP {slot.worker_id} for {pause:.1f}s (lease ttl {self.settings.lease_ttl}s)"
        )

        def cont() -> None:
            if slot.stopped_at is None:
                return
            slot.signal(signal.SIGCONT)
            held = time.monotonic() - slot.stopped_at
            self.tally.longest_stop_s = max(self.tally.longest_stop_s, held)
            slot.stopped_at = None
            self.say(f"SIGCONT {slot.worker_id} after {held:.1f}s")

        self.at(pause, f"cont w{slot.index}", cont)

    def random_restart(self) -> None:
        mode = self.rng.choice(["fast", "immediate", "crash"])
        self.restart_server(mode)

    def restart_server(self, mode: str) -> None:
        """Take the server down (fast/immediate shutdown or SIGKILL of the postmaster), keep it
        down for up to 1.5 lease TTLs, then start it again."""
        assert self.server is not None
        if self.server_down:
            self.at(1.0, f"restart {mode}", lambda: self.restart_server(mode))
            return
        down_for = self.settings.lease_ttl * self.rng.uniform(0.0, 1.5)
        self.say(f"server: {mode} shutdown, down for {down_for:.1f}s")
        started = time.monotonic()
        if mode == "crash":
            self.server.kill()
        else:
            self.server.stop(mode=mode)
        self.server_down = True
        self.tally.restarts[mode] += 1
        self.tally.actions[f"server {mode}"] += 1

        server = self.server

        def up() -> None:
            server.start()
            self.server_down = False
            outage = time.monotonic() - started
            self.tally.longest_outage_s = max(self.tally.longest_outage_s, outage)
            self.say(f"server: up again after {outage:.1f}s")

        self.at(down_for, "server up", up)

    def fail_over(self) -> None:
        """Kill the primary; promote the standby up to one lease TTL later (a failure noticed
        and acted on), then seed a new standby (bench/failover.py)."""
        replicas = self.replicas
        assert replicas is not None
        if self.server_down:
            self.at(1.0, "failover", self.fail_over)
            return
        self.server_down = True
        self.tally.actions["failover"] += 1
        replicas.kill(self.say, self.settings.lag)
        started = time.monotonic()

        def promote() -> None:
            replicas.promote_and_reseed(self.say)
            self.server_down = False
            self.tally.longest_outage_s = replicas.tally.longest_outage_s
            self.say(f"failover: done {time.monotonic() - started:.1f}s after the kill")

        self.at(self.settings.lease_ttl * self.rng.uniform(0.1, 1.0), "promote", promote)

    def operator_action(self, store: Operations) -> None:
        """Guarded operator actions, as the console and the CLI issue them."""
        if self.server_down:
            return
        kind = self.rng.choice(["requeue-expired", "force-requeue", "quarantine", "force-stuck"])
        try:
            if kind == "requeue-expired":
                seen = [
                    SeenState(j.id, j.status, j.attempts, j.lease_owner)
                    for j in store.list_expired(limit=5, queue=QUEUE)
                ]
                self._operator(store, kind, seen, requeue=True, force=False)
            elif kind == "force-requeue":
                self._operator(store, kind, self._sample("Processing", 1), requeue=True, force=True)
            elif kind == "quarantine":
                seen = self._sample("Pending", 3)
                changed = self._operator(store, kind, seen, requeue=False, force=False)
                self._unquarantine_later(store, changed)
            else:
                seen = self._sample("Processing", 1)
                changed = self._operator(store, kind, seen, requeue=False, force=True)
                self._unquarantine_later(store, changed)
        except ConnectionFailed as exc:
            self.say(f"operator {kind}: {exc}")

    def _sample(self, status: str, n: int) -> list[SeenState]:
        rows = self.q(
            "SELECT id, status::text, attempts, lease_owner FROM {s}.jobs "
            "WHERE status = %s AND run_at <= now() ORDER BY random() LIMIT %s",
            (status, n),
        )
        return [SeenState(r[0], JobStatus(r[1]), r[2], r[3]) for r in rows]

    def _operator(
        self, store: Operations, kind: str, seen: list[SeenState], *, requeue: bool, force: bool
    ) -> list[int]:
        if not seen:
            return []
        act = store.operator_requeue if requeue else store.operator_mark_stuck
        self.tally.operator_calls += 1
        self.tally.operator_max_ids = max(self.tally.operator_max_ids, len(seen))
        try:
            result = act(seen, actor=OPERATOR, reason=f"chaos {kind}", force=force)
        except ConnectionFailed:
            self.tally.operator_unknown += 1
            raise
        self.tally.operator_changed += len(result.changed)
        self.tally.actions[f"operator {kind}"] += 1
        if result.changed:
            self.say(f"operator {kind}: {list(result.changed)}")
        return list(result.changed)

    def _unquarantine_later(self, store: Operations, ids: list[int]) -> None:
        if not ids:
            return

        def requeue() -> None:
            if self.server_down:
                self.at(1.0, "unquarantine", requeue)
                return
            with contextlib.suppress(ConnectionFailed):
                self._operator(
                    store, "unquarantine", store.seen_now(ids), requeue=True, force=False
                )

        self.at(self.rng.uniform(0.5, 3.0), "unquarantine", requeue)

    # -- the end --------------------------------------------------------------------------------

    def drain(self, store: Operations) -> None:
        """Chaos over: every worker runs; wait until every job is Completed (or the deadline)."""
        self.say("chaos over: draining")
        deadline = time.monotonic() + self.settings.drain_timeout
        for slot in self.slots:
            if not slot.alive:
                slot.start()
        while True:
            self.reap()
            self.run_due()
            rows = dict(self.q("SELECT status::text, count(*) FROM {s}.jobs GROUP BY 1"))
            if rows.get("Completed", 0) == self.settings.jobs:
                self.say(f"drained: {self.settings.jobs} jobs Completed")
                return
            if rows.get("Stuck"):
                seen = self._sample("Stuck", 1000)
                with contextlib.suppress(ConnectionFailed):
                    self._operator(store, "unquarantine", seen, requeue=True, force=False)
            if time.monotonic() > deadline:
                self.problems.append(f"drain timed out: {rows}")
                self.say(f"drain timed out: {rows}")
                return
            time.sleep(0.5)

    def stop_workers(self) -> None:
        # A worker (re)started just before the end may still be importing: a SIGTERM before it
        # installs its handler kills it (exit -15), which says nothing about the worker. Wait
        # (a bounded time) until each one is ready.
        deadline = time.monotonic() + 30
        for slot in self.slots:
            while slot.alive and not slot.ready and time.monotonic() < deadline:
                time.sleep(0.1)
        for slot in self.slots:
            if slot.alive:
                slot.expect_exit = "term"
                slot.signal(signal.SIGTERM)
        for slot in self.slots:
            if slot.proc is None:
                continue
            try:
                code = slot.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.problems.append(f"{slot.worker_id} did not stop within 30s of SIGTERM")
                continue
            if code != 0:
                self.problems.append(f"{slot.worker_id} exited {code} after the final SIGTERM")

    # -- invariants -----------------------------------------------------------------------------

    def check(self, watcher_moved: int) -> Report:
        s = self.settings
        checks: list[Check] = []

        def add(name: str, bad: list[Any], detail: str) -> None:
            checks.append(Check(name, not bad, detail, [list(map(str, b)) for b in bad[:5]]))

        statuses = dict(self.q("SELECT status::text, count(*) FROM {s}.jobs GROUP BY 1"))
        total = sum(statuses.values())
        add(
            "every job Completed (none lost, none stuck in Processing)",
            [] if statuses == {"Completed": s.jobs} else [(f"{statuses}",)],
            f"{statuses.get('Completed', 0)} of {s.jobs} Completed; all statuses {statuses}",
        )
        bad = self.q(
            "SELECT j.id, j.attempts, count(a.attempt), min(a.attempt), max(a.attempt) "
            "FROM {s}.jobs AS j LEFT JOIN {s}.job_attempts AS a ON a.job_id = j.id "
            "GROUP BY j.id HAVING j.attempts <> count(a.attempt) OR min(a.attempt) <> 1 "
            "OR max(a.attempt) <> j.attempts ORDER BY j.id"
        )
        add(
            "attempts = count(job_attempts), numbered 1..attempts",
            bad,
            f"{len(bad)} jobs whose attempts disagree with job_attempts",
        )
        bad = self.q(
            "SELECT job_id, attempt, outcome::text FROM {s}.job_attempts "
            "WHERE outcome = 'running' OR ended_at IS NULL ORDER BY 1, 2"
        )
        add("every attempt has an outcome", bad, f"{len(bad)} attempts still 'running'")
        bad = self.q(
            "SELECT j.id, j.attempts, j.lease_owner, "
            "       count(*) FILTER (WHERE a.outcome = 'completed'), "
            "       max(a.attempt) FILTER (WHERE a.outcome = 'completed'), "
            "       max(a.lease_owner) FILTER (WHERE a.outcome = 'completed') "
            "FROM {s}.jobs AS j JOIN {s}.job_attempts AS a ON a.job_id = j.id "
            "WHERE j.status = 'Completed' GROUP BY j.id "
            "HAVING count(*) FILTER (WHERE a.outcome = 'completed') <> 1 "
            "    OR max(a.attempt) FILTER (WHERE a.outcome = 'completed') <> j.attempts "
            "    OR max(a.lease_owner) FILTER (WHERE a.outcome = 'completed') "
            "       IS DISTINCT FROM j.lease_owner ORDER BY j.id"
        )
        add(
            "fencing: each job completed once, by its last lease (never after a takeover)",
            bad,
            f"{len(bad)} jobs completed more than once, or by an attempt that was not the last",
        )
        bad = self.q(
            "SELECT a.job_id, a.attempt, a.lease_owner FROM {s}.job_attempts AS a "
            "WHERE a.outcome = 'completed' AND NOT EXISTS ("
            "  SELECT 1 FROM {s}.chaos_executions AS e WHERE e.job_id = a.job_id "
            "  AND e.attempt = a.attempt AND e.worker = a.lease_owner AND e.outcome = 'ok' "
            "  AND e.ended_at <= a.ended_at) ORDER BY 1, 2"
        )
        add(
            "fencing: every completion comes from a finished execution of that lease's holder",
            bad,
            f"{len(bad)} completions without a matching execution",
        )
        bad = self.q(
            "SELECT e.job_id, e.attempt, e.worker, a.lease_owner FROM {s}.chaos_executions AS e "
            "LEFT JOIN {s}.job_attempts AS a ON a.job_id = e.job_id AND a.attempt = e.attempt "
            "WHERE a.lease_owner IS DISTINCT FROM e.worker OR e.started_at < a.started_at "
            "UNION ALL "
            "SELECT job_id, attempt, min(worker), count(*)::text FROM {s}.chaos_executions "
            "GROUP BY 1, 2 HAVING count(*) > 1"
        )
        add(
            "every execution ran under a lease its worker was given (one per attempt)",
            bad,
            f"{len(bad)} executions without their own lease",
        )
        windows = (
            "WITH w AS ("
            "  SELECT a.job_id, a.attempt, a.outcome, a.started_at, a.ended_at,"
            # An expired lease was valid until its last heartbeat + ttl (its ended_at is when
            # someone noticed); any other lease ended at the explicit action, or lapsed first.
            "         CASE WHEN a.outcome = 'expired'"
            "              THEN a.heartbeat_at + coalesce(k.lease_ttl, %(ttl)s)"
            "              ELSE least(a.ended_at, a.heartbeat_at + coalesce(k.lease_ttl, %(ttl)s))"
            "         END AS valid"
            "  FROM {s}.job_attempts AS a"
            "  LEFT JOIN {s}.workers AS k ON k.worker_id = a.lease_owner) "
        )
        ttl = timedelta(seconds=s.lease_ttl)
        bad = self.q(
            windows + "SELECT x.job_id, x.attempt, x.valid, y.started_at FROM w AS x "
            "JOIN w AS y ON y.job_id = x.job_id AND y.attempt = x.attempt + 1 "
            "WHERE y.started_at < x.valid ORDER BY 1, 2",
            {"ttl": ttl},
        )
        add(
            "lease windows of one job never overlap",
            bad,
            f"{len(bad)} leases granted while the previous one was still valid",
        )
        overlap = (
            windows + ", v AS ("
            "  SELECT e.job_id, e.attempt, e.started_at AS s, e.ended_at AS u,"
            "         least(e.ended_at, w.valid) AS vu"
            "  FROM {s}.chaos_executions AS e JOIN w USING (job_id, attempt)) "
            "SELECT x.job_id, x.attempt, y.attempt FROM v AS x "
            "JOIN v AS y ON y.job_id = x.job_id AND x.attempt < y.attempt WHERE "
        )
        bad = self.q(
            overlap + "x.s < x.vu AND y.s < y.vu AND x.s < y.vu AND y.s < x.vu ORDER BY 1, 2",
            {"ttl": ttl},
        )
        add(
            "no two executions of one job overlap while both held a valid lease",
            bad,
            f"{len(bad)} overlapping pairs within valid leases",
        )
        zombie_overlaps = self.q(
            "SELECT count(*) FROM (" + overlap + "x.s < y.u AND y.s < x.u) AS o", {"ttl": ttl}
        )[0][0]
        bad = self.q(
            "SELECT a.job_id, a.attempt, a.error FROM {s}.job_attempts AS a "
            "LEFT JOIN {s}.job_attempts AS n ON n.job_id = a.job_id AND n.attempt = a.attempt + 1 "
            "WHERE a.outcome = 'expired' AND NOT ("
            "  starts_with(a.error, 'lease expired; ' || %(watcher)s || ' moved the job to ')"
            "  OR a.error = 'lease expired; taken over by ' || n.lease_owner) ORDER BY 1, 2",
            {"watcher": WATCHER},
        )
        add(
            "every expired attempt was closed by a takeover or by the watcher",
            bad,
            f"{len(bad)} expired attempts without a takeover or a watcher move",
        )
        event_match = (
            "WITH a AS (SELECT job_id, attempt FROM {s}.job_attempts WHERE %(cond)s), "
            "e AS (SELECT job_id, (before->>'attempts')::integer AS attempt FROM {s}.job_events"
            "      WHERE actor = %(actor)s AND %(econd)s) "
            "SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM e), "
            " (SELECT count(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM e "
            "   WHERE e.job_id = a.job_id AND e.attempt = a.attempt)), "
            " (SELECT count(*) FROM e WHERE NOT EXISTS (SELECT 1 FROM a "
            "   WHERE e.job_id = a.job_id AND e.attempt = a.attempt)), "
            " (SELECT count(*) - count(DISTINCT (job_id, attempt)) FROM e)"
        )
        w_attempts, w_events, w_no_event, w_no_attempt, w_dupes = self.q(
            event_match.replace(
                "%(cond)s",
                "outcome = 'expired' AND starts_with(error, 'lease expired; ' || %(actor)s)",
            ).replace("%(econd)s", "true"),
            {"actor": WATCHER},
        )[0]
        add(
            "every watcher change has its job_events row (and every row its change)",
            [("attempts without event", w_no_event), ("events without attempt", w_no_attempt)]
            if w_no_event or w_no_attempt or w_dupes
            else [],
            f"{w_attempts} attempts closed by the watcher, {w_events} watcher events, "
            f"{w_no_event} without event, {w_no_attempt} without attempt, {w_dupes} duplicated",
        )
        watcher_gap = w_events - watcher_moved
        watcher_ok = 0 <= watcher_gap and (watcher_gap == 0 or self.tally.watcher_failed_passes)
        add(
            "the watcher's own count matches its events",
            [] if watcher_ok else [(watcher_moved, w_events)],
            f"watcher reported {watcher_moved} moves, {w_events} events "
            f"({self.tally.watcher_failed_passes} passes with an unknown outcome)",
        )
        o_attempts, _o_events, o_no_event, o_no_attempt, o_dupes = self.q(
            event_match.replace(
                "%(cond)s",
                "(outcome = 'requeued' AND error = 'requeued by ' || %(actor)s) OR "
                "(outcome = 'marked_stuck' AND error = 'marked stuck by ' || %(actor)s)",
            ).replace("%(econd)s", "before->>'status' = 'Processing'"),
            {"actor": OPERATOR},
        )[0]
        total_op_events = self.q(
            "SELECT count(*) FROM {s}.job_events WHERE actor = %s", (OPERATOR,)
        )[0][0]
        op_gap = total_op_events - self.tally.operator_changed
        op_ok = 0 <= op_gap <= self.tally.operator_unknown * self.tally.operator_max_ids
        add(
            "every operator change has its job_events row",
            []
            if not (o_no_event or o_no_attempt or o_dupes) and op_ok
            else [(o_no_event, o_no_attempt, o_dupes, op_gap)],
            f"{self.tally.operator_changed} changes reported, {total_op_events} operator events "
            f"({self.tally.operator_unknown} calls with an unknown outcome); "
            f"{o_attempts} leases ended by an operator, {o_no_event} without event, "
            f"{o_no_attempt} events without attempt",
        )
        bad = self.q(
            "SELECT id, action, after->>'status' FROM {s}.job_events WHERE NOT ("
            " (action IN ('requeue', 'requeue_forced') AND after->>'status' = 'Pending') OR"
            " (action IN ('mark_stuck', 'mark_stuck_forced') AND after->>'status' = 'Stuck') OR"
            " (action = 'fail' AND after->>'status' = 'Failed'))"
        )
        add("every event's action matches its new state", bad, f"{len(bad)} inconsistent events")
        bad = self.q(
            "SELECT j.id, j.status::text, j.payload->>'tx', count(b.job_id), "
            "       max(b.attempt), j.attempts, max(b.worker), j.lease_owner "
            "FROM {s}.jobs AS j LEFT JOIN {s}.chaos_business AS b ON b.job_id = j.id "
            "GROUP BY j.id "
            "HAVING count(b.job_id) <> CASE WHEN j.status = 'Completed' "
            "                               AND (j.payload->>'tx')::boolean THEN 1 ELSE 0 END "
            "    OR max(b.attempt) <> j.attempts OR max(b.worker) <> j.lease_owner "
            "UNION ALL "
            "SELECT b.job_id, 'no such job', NULL, count(*), NULL, NULL, NULL, NULL "
            "FROM {s}.chaos_business AS b WHERE NOT EXISTS "
            "  (SELECT 1 FROM {s}.jobs AS j WHERE j.id = b.job_id) GROUP BY b.job_id"
        )
        business = self.q("SELECT count(*) FROM {s}.chaos_business")[0][0]
        tx_jobs = self.q("SELECT count(*) FROM {s}.jobs WHERE (payload->>'tx')::boolean")[0][0]
        add(
            "every Completed job of ctx.transaction() has exactly one business row, written by "
            "its completing lease, and no other job has one",
            bad,
            f"{business} business rows for {tx_jobs} transaction jobs; {len(bad)} jobs wrong",
        )
        ledger: dict[str, Any] = {}
        if self.replicas is not None:
            ledger = ledger_checks(self.q, self.workdir, add)
        logs = self.scan_logs()
        add(
            "no worker crashed, died on its own or failed to stop",
            [(p,) for p in self.problems + logs.pop("problems")],
            f"{len(self.problems)} process problems",
        )

        executions = dict(self.q("SELECT outcome, count(*) FROM {s}.chaos_executions GROUP BY 1"))
        dup = self.q(
            "SELECT count(*), count(DISTINCT e.job_id) FROM {s}.chaos_executions AS e "
            "JOIN {s}.job_attempts AS a USING (job_id, attempt) "
            "WHERE a.outcome <> 'completed' AND e.outcome <> 'error'"
        )[0]
        outcomes = dict(
            self.q("SELECT outcome::text, count(*) FROM {s}.job_attempts GROUP BY 1 ORDER BY 1")
        )
        takeovers = self.q(
            "SELECT count(*) FROM {s}.job_attempts WHERE outcome = 'expired' "
            "AND starts_with(error, 'lease expired; taken over by ')"
        )[0][0]
        late = self.q(
            "SELECT count(*) FROM {s}.job_attempts AS a "
            "JOIN {s}.workers AS k ON k.worker_id = a.lease_owner "
            "WHERE a.outcome = 'completed' AND a.ended_at > a.heartbeat_at + k.lease_ttl"
        )[0][0]
        max_attempts = self.q("SELECT max(attempts) FROM {s}.jobs")[0][0]
        counts = {
            "jobs": total,
            "executions": sum(executions.values()),
            "executions_by_outcome": executions,
            "duplicate_executions": dup[0],
            "jobs_executed_again_after_losing_a_lease": dup[1],
            "executions_overlapping_a_zombie": zombie_overlaps,
            "attempts_by_outcome": outcomes,
            "takeovers_by_claim": takeovers,
            "watcher_moves": w_events,
            "operator_events": total_op_events,
            "completed_after_lapse_without_takeover": late,
            "max_attempts_of_a_job": max_attempts,
            "transaction_jobs": tx_jobs,
            "business_rows": business,
            **ledger,
            **logs,
        }
        if self.replicas is not None:
            counts["failover"] = {
                **vars(self.replicas.tally),
                "mode": s.failover,
            }
        return Report(
            settings={k: v for k, v in asdict(s).items() if k != "dsn"},
            # Not asdict(): it rebuilds a Counter from (key, value) pairs and counts the pairs.
            tally={
                **vars(self.tally),
                "restarts": dict(self.tally.restarts),
                "actions": dict(self.tally.actions),
            },
            counts=counts,
            checks=checks,
            elapsed_s=round(self.elapsed(), 1),
        )

    def scan_logs(self) -> dict[str, Any]:
        found: Counter[str] = Counter()
        problems: list[str] = []
        needles = {
            "refused the result": "results_refused_by_the_fence",
            "refused the completion": "transactions_refused_by_the_fence",
            "heartbeat rejected": "heartbeats_rejected",
            "could not heartbeat before the lease lapsed": "leases_presumed_lost_offline",
            "database unreachable past the lease": "results_dropped_offline",
            "lease lost before the result could be written": "results_dropped_after_loss",
            "released": "graceful_releases",
        }
        for slot in self.slots:
            for path in slot.logs:
                try:
                    text = path.read_text(errors="replace")
                except OSError:
                    continue
                for line in text.splitlines():
                    for needle, key in needles.items():
                        if needle in line and (key != "graceful_releases" or "unfinished" in line):
                            found[key] += 1
                    if "Traceback" in line or "unexpected error" in line or "Exception in" in line:
                        problems.append(f"{path.name}: {line.strip()[:200]}")
        return {**{k: found[k] for k in needles.values()}, "problems": problems[:20]}


class _WatcherFailures(logging.Handler):
    """Counts watcher passes that failed on a lost connection (their outcome is unknown)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying in" in record.getMessage():
            self.failures += 1


def _tail(path: Path | None, lines: int = 3) -> str:
    if path is None:
        return ""
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- printing -----------------------------------------------------------------------------------


def render(report: Report, where: str) -> str:
    s = report.settings
    t = report.tally
    c = report.counts
    restarts = t["restarts"]
    out = [
        f"leasectl chaos soak: {s['workers']} workers x {s['concurrency']}, {s['jobs']} jobs, "
        f"{s['duration']:g}s of chaos, lease ttl {s['lease_ttl']:g}s, heartbeat "
        f"{s['heartbeat']:g}s, watcher every {s['watch_interval']:g}s, seed {s['seed']}",
        f"server: {where}",
        f"elapsed: {report.elapsed_s:.0f}s",
        "",
        "chaos:",
        f"  SIGKILL workers            {t['kills']}",
        f"  SIGTERM workers            {t['terms']}",
        f"  SIGSTOP/SIGCONT            {t['stops']} (longest stop {t['longest_stop_s']:.1f}s)",
        f"  worker (re)starts          {t['worker_starts']}",
        f"  operator calls             {t['operator_calls']} ({t['operator_changed']} jobs "
        f"changed, {t['operator_unknown']} calls lost with the connection)",
    ]
    if "failover" not in c:
        out.insert(
            -1,
            f"  server restarts            {sum(restarts.values())} "
            f"(fast {restarts.get('fast', 0)}, immediate {restarts.get('immediate', 0)}, "
            f"postmaster SIGKILL {restarts.get('crash', 0)}; longest outage "
            f"{t['longest_outage_s']:.1f}s)",
        )
    else:
        f = c["failover"]
        out += [
            f"  {'failovers (' + f['mode'] + ')':<27}{f['failovers']} (each: WAL sending held back "
            f"{s['lag']:g}s, the primary SIGKILLed, the standby promoted)",
            f"  {'  longest outage':<27}{f['longest_outage_s']:.1f}s (kill to promoted); new "
            f"standby seeded in {f['longest_reseed_s']:.1f}s at most",
            f"  {'  WAL unreplayed at kill':<27}{f['lag_bytes_at_kill']} bytes",
        ]
    out += [
        "",
        "counts:",
        f"  jobs                       {c['jobs']}",
        f"  executions                 {c['executions']} {c['executions_by_outcome']}",
        f"  duplicate executions       {c['duplicate_executions']} in "
        f"{c['jobs_executed_again_after_losing_a_lease']} jobs (lease expired, taken over, "
        "requeued or released)",
        f"  ran beside a zombie        {c['executions_overlapping_a_zombie']} pairs (in wall "
        "time, never both with a valid lease)",
        f"  attempts by outcome        {c['attempts_by_outcome']}",
        f"  takeovers by claim         {c['takeovers_by_claim']}",
        f"  requeues by the watcher    {c['watcher_moves']}",
        f"  operator events            {c['operator_events']}",
        f"  results refused by fence   {c['results_refused_by_the_fence']}",
        f"  in ctx.transaction()       {c['transaction_jobs']} jobs, {c['business_rows']} "
        f"business rows, {c['transactions_refused_by_the_fence']} completions refused (rolled "
        "back)",
        f"  heartbeats rejected        {c['heartbeats_rejected']} (worker warnings; most are "
        "jobs the worker had just finished itself, see RELIABILITY.md)",
        f"  leases given up offline    {c['leases_presumed_lost_offline']}",
        f"  late but valid completions {c['completed_after_lapse_without_takeover']} "
        "(lease lapsed, nobody took over)",
        f"  most attempts of one job   {c['max_attempts_of_a_job']}",
    ]
    if "ledger_executions" in c:
        out += [
            f"  handlers' own ledger       {c['ledger_executions']} acknowledged execution "
            f"records ({c['ledger_executions_lost']} lost by a failover), "
            f"{c['ledger_transactions']} acknowledged ctx.transaction() commits "
            f"({c['ledger_transactions_lost']} lost: their job ran again)",
            f"  leases a failover forgot   {c['ledger_leases_forgotten']} executions "
            f"({c['ledger_tokens_reused']} with their (job, attempt) token given to another "
            f"worker; {c['ledger_tokens_executed_twice']} tokens executed by two workers)",
        ]
    out += [
        "",
        "invariants:",
    ]
    broken = {c.name for c in report.broken_by_async}
    for check in report.checks:
        mark = "ok" if check.ok else "BROKEN" if check.name in broken else "FAIL"
        out.append(f"  [{mark}] {check.name}: {check.detail}")
        for row in check.sample:
            out.append(f"         e.g. {row}")
    n = len(report.violations)
    out += ["", f"RESULT: {'PASS' if n == 0 else 'FAIL'} ({n} violated invariants)"]
    if report.settings.get("failover") == "async":
        out[-1] += (
            f"; asynchronous failover broke {len(broken)} of the {len(ASYNC_MAY_BREAK)} it may "
            "break (BROKEN above)"
        )
    return "\n".join(out)


# -- entry point --------------------------------------------------------------------------------


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
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n")[0])
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


if __name__ == "__main__":
    sys.exit(main())
