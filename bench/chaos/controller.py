"""The soak's controller: it sets the schema up, runs the workers and the watcher, does the chaos
(kills, stops, restarts, failovers, operator actions), drains, and checks the invariants."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.chaos import invariants
from bench.chaos.model import MAX_ATTEMPTS, OPERATOR, QUEUE, WATCHER, Report, Settings, Tally
from bench.chaos.workers import Slot
from bench.failover import Replicas, ledger_checks
from leasectl.core.errors import ConnectionFailed
from leasectl.core.models import JobStatus, SeenState
from leasectl.db.connection import Database
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.operations import Operations
from leasectl.runtime.watcher import Watcher, WatcherConfig


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
        invariants.create_tables(self.q)
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
        """Every invariant (``invariants.py``) and the counts of the report."""
        s = self.settings
        ttl = timedelta(seconds=s.lease_ttl)
        checks, found = invariants.database_checks(self.q, s.jobs, ttl, self.tally, watcher_moved)

        def add(name: str, bad: list[Any], detail: str) -> None:
            checks.append(invariants.check(name, bad, detail))

        ledger: dict[str, Any] = {}
        if self.replicas is not None:
            ledger = ledger_checks(self.q, self.workdir, add)
        logs = self.scan_logs()
        checks.append(
            invariants.no_process_problems(self.problems + logs.pop("problems"), len(self.problems))
        )

        counts = {
            **invariants.counts(self.q),
            "executions_overlapping_a_zombie": found["executions_overlapping_a_zombie"],
            "watcher_moves": found["watcher_moves"],
            "operator_events": found["operator_events"],
            "transaction_jobs": found["transaction_jobs"],
            "business_rows": found["business_rows"],
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
