"""One demo run: the watcher, the fleet and the producer in threads over one pool; progress
while it runs, and at the end the drain, the settling and the count.

Headless, after ``duration``: the producer stops, the fleet drains (bounded by
drain_timeout), the workers get SIGTERM (they release what they hold), the leases of killed
workers are left to lapse, a last watcher pass runs, and the database is counted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from leasectl.core.errors import LeasectlError
from leasectl.db import demo as demo_db
from leasectl.db.connection import Database
from leasectl.db.operations import Operations
from leasectl.demo.fleet import FLEET, Fleet, FleetConfig
from leasectl.demo.summary import DemoSummary
from leasectl.demo.target import Target
from leasectl.demo.traffic import Traffic
from leasectl.runtime.watcher import Watcher, WatcherConfig, run_pass

READY_TIMEOUT = 60.0  # python start-up of the fleet on a loaded machine


class Run:
    def __init__(
        self,
        target: Target,
        config: FleetConfig,
        run_id: str,
        log_dir: Path,
        say: Callable[[str], None],
        interrupted: threading.Event,
    ) -> None:
        self.target = target
        self.config = config
        self.run_id = run_id
        self.log_dir = log_dir
        self.say = say
        self.interrupted = interrupted
        self.db = Database.connect(
            target.dsn, target.schema, max_size=6, application_name="leasectl demo"
        )
        self.ops = Operations(self.db)
        self.watcher = Watcher(self.ops, WatcherConfig(interval=config.watch_interval))
        self.fleet = Fleet(
            dsn=target.dsn,
            schema=target.schema,
            config=config,
            run_id=run_id,
            log_dir=log_dir,
            db=self.db,
            say=say,
        )
        self.traffic = Traffic(self.ops, config, run_id, say)
        self.threads = {
            "watcher": threading.Thread(target=self.watcher.run, name="leasectl-demo-watcher"),
            "fleet": threading.Thread(target=self.fleet.run, name="leasectl-demo-fleet"),
            "traffic": threading.Thread(target=self.traffic.run, name="leasectl-demo-traffic"),
        }
        self.started = time.monotonic()
        self.closed = False

    def start(self) -> None:
        left = demo_db.rows(self.db, "demo_live_leases")[0]["processing"]
        if left:
            self.say(
                f"{left} job(s) are still leased by workers of an earlier demo that did not exit "
                "cleanly: their leases lapse and the watcher requeues them"
            )
        self.threads["watcher"].start()
        self.threads["fleet"].start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.fleet.ready.wait(0.05):
            if self.interrupted.is_set():
                return
            if self.fleet.failing():
                raise LeasectlError(
                    f"the demo's workers keep exiting{self._worker_complaint()}; "
                    f"worker logs in {self.log_dir}"
                )
            if self.fleet.done.is_set() or time.monotonic() > deadline:
                raise LeasectlError(
                    f"the demo's workers did not come up within {READY_TIMEOUT:.0f}s"
                    f"{self._worker_complaint()}; worker logs in {self.log_dir}"
                )
        self.threads["traffic"].start()
        self.started = time.monotonic()
        c = self.config
        self.say(
            f"fleet up: {', '.join(s.name for s in FLEET)}; leases {c.lease_ttl.total_seconds():g}s"
            f", heartbeat every {c.heartbeat_every.total_seconds():g}s, watcher every "
            f"{c.watch_interval.total_seconds():g}s; a stall and a SIGKILL every "
            f"{c.chaos_every.total_seconds():g}s"
        )

    def _worker_complaint(self) -> str:
        """The last log line of a failing worker (else of any worker), for the error."""
        for name in [*self.fleet.failing(1), *(s.name for s in FLEET)]:
            with contextlib.suppress(OSError):
                lines = (self.log_dir / f"{name}.log").read_text(errors="replace")
                tail = [ln for ln in lines.splitlines() if ln.strip()]
                if tail:
                    return f" ({name}: {tail[-1].strip()[:300]})"
        return ""

    def wait(self, duration: timedelta | None) -> None:
        """Headless: let the fleet run for ``duration`` (None: until a signal), with progress."""
        end = None if duration is None else self.started + duration.total_seconds()
        every = self.config.progress_every.total_seconds()
        next_progress = self.started + every
        while not self.interrupted.is_set():
            now = time.monotonic()
            if end is not None and now >= end:
                return
            if self.fleet.done.is_set():
                raise LeasectlError("the demo fleet stopped unexpectedly")
            if now >= next_progress:
                self.progress()
                next_progress += every
            stops = [t for t in (end, next_progress) if t is not None]
            self.interrupted.wait(max(0.01, min(stops) - now))

    def _tally(self) -> demo_db.Tally:
        return demo_db.tally(
            self.db,
            self.traffic.ids,
            watcher=self.watcher.config.actor,
            operator=self.traffic.actor,
        )

    def progress(self) -> None:
        try:
            t = self._tally()
        except LeasectlError as exc:
            self.say(f"progress: {exc}")
            return
        f = self.fleet
        self.say(
            f"{len(self.traffic.ids)} enqueued: {t.completed} completed, {t.failed} failed, "
            f"{t.stuck} stuck, {t.processing} processing, {t.pending} pending | "
            f"{t.failed_attempts} retries, {t.watcher_requeued} watcher requeues | "
            f"{f.kills} kills, {f.stalls} stalls"
        )

    def _drain(self) -> tuple[bool, float]:
        """Producer stopped: let the fleet finish what is queued, for a bounded time."""
        started = time.monotonic()
        deadline = started + self.config.drain_timeout.total_seconds()
        t = self._tally()
        self.say(
            f"producer stopped; draining {t.open} open jobs "
            f"(at most {self.config.drain_timeout.total_seconds():g}s)"
        )
        next_progress = started + self.config.progress_every.total_seconds()
        while t.open and not self.interrupted.is_set() and time.monotonic() < deadline:
            self.interrupted.wait(0.2)
            t = self._tally()
            if time.monotonic() >= next_progress:
                self.say(f"draining: {t.pending} pending, {t.processing} processing")
                next_progress += self.config.progress_every.total_seconds()
        return t.open == 0, time.monotonic() - started

    def _settle(self) -> bool:
        """All workers stopped: wait for the leases killed workers still hold to lapse, so that
        the last watcher pass leaves nothing Processing in the schema (not even the leftovers
        of an earlier demo that was killed). Only demos use the schema, one at a time."""
        deadline = time.monotonic() + self.config.lease_ttl.total_seconds() + 2
        while demo_db.rows(self.db, "demo_live_leases")[0]["leased"]:
            if self.interrupted.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def finish(self, *, drain: bool, force: threading.Event) -> DemoSummary:
        ran = time.monotonic() - self.started
        self.traffic.stop_producing()
        self.fleet.chaos.clear()
        drained, drain_s = False, 0.0
        if drain and not self.interrupted.is_set():
            drained, drain_s = self._drain()
        self._stop_threads(force)
        settled = not self.interrupted.is_set() and self._settle()
        try:
            final = run_pass(self.ops, self.watcher.config, listed=0)
            if final.total:
                self.say(f"last watcher pass: requeued {final.requeued}, failed {final.failed}")
        except LeasectlError as exc:
            self.say(f"last watcher pass failed: {exc}")
        t = self._tally()
        ids = self.traffic.ids
        missing = len(ids) - t.present
        lost = missing + t.completed_twice + (t.processing if settled else 0)
        f = self.fleet
        summary = DemoSummary(
            run_id=self.run_id,
            target=self.target.where,
            schema=self.target.schema,
            server=self.target.server,
            seconds=round(ran, 1),
            drain_seconds=round(drain_s, 1),
            drained=drained,
            interrupted=self.interrupted.is_set(),
            enqueued=len(ids),
            completed=t.completed,
            failed=t.failed,
            stuck=t.stuck,
            pending=t.pending,
            processing=t.processing,
            retried=t.failed_attempts,
            requeued_by_watcher=t.watcher_requeued,
            taken_over=max(0, t.expired_leases - t.watcher_moved),
            leases_expired=t.expired_leases,
            quarantined=t.quarantined,
            worker_kills=f.kills,
            worker_stalls=f.stalls,
            worker_restarts=f.restarts,
            worker_crashes=f.crashes,
            workers_started=f.started,
            workers_stopped=f.reaped,
            workers_left=f.left,
            unfinished=t.pending + (0 if settled else t.processing),
            lost=lost,
        )
        self.say(
            f"done: {summary.enqueued} enqueued, {summary.completed} completed, "
            f"lost {summary.lost}, unfinished {summary.unfinished}"
        )
        return summary

    def _stop_threads(self, force: threading.Event) -> None:
        self.traffic.stop()
        self.fleet.stop(force=force.is_set())
        for name in ("traffic", "fleet"):
            thread = self.threads[name]
            if thread.is_alive():
                thread.join(timeout=60)
        self.watcher.stop()

    def close(self, force: threading.Event) -> None:
        """Idempotent: stop every thread and process, then close the pool."""
        if self.closed:
            return
        self.closed = True
        self._stop_threads(force)
        watcher = self.threads["watcher"]
        if watcher.is_alive():
            watcher.join(timeout=30)
        self.db.close()
