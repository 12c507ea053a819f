"""The worker's keeper threads: heartbeats (every held lease renewed in one statement, carrying
the handlers' progress), LISTEN (enqueues wake the dispatcher), and the deadline (a lease that
lapsed unrenewed is lost, told to its handler without waiting for any database call; a handler
past its job's timeout is cancelled)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leasectl.core.backoff import reconnect_delay
from leasectl.core.errors import ConnectionFailed, LeasectlError
from leasectl.db.work import NOTIFY_QUEUE_CHARS, WorkerStore
from leasectl.runtime.worker.config import WorkerConfig
from leasectl.runtime.worker.context import LeaseContext
from leasectl.runtime.worker.ledger import Ledger

log = logging.getLogger("leasectl.worker")


@dataclass
class Signals:
    """The events the worker's threads share."""

    stopping: threading.Event  # no more claims
    closed: threading.Event  # shut down: nothing held any more
    listening: threading.Event  # LISTEN took effect once: enqueues wake us
    # A NOTIFY said a job was enqueued on our queues (or one was paused or resumed).
    announced: threading.Event


class Keepers:
    def __init__(
        self,
        config: WorkerConfig,
        ledger: Ledger,
        store: Callable[[], WorkerStore],
        signals: Signals,
    ) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.ledger = ledger
        self.store = store
        self.signals = signals

    def threads(self) -> list[threading.Thread]:
        return [
            threading.Thread(target=self.heartbeat_loop, name="leasectl-heartbeat", daemon=True),
            threading.Thread(target=self.listen_loop, name="leasectl-listen", daemon=True),
            threading.Thread(target=self.deadline_loop, name="leasectl-deadline", daemon=True),
        ]

    def listen_loop(self) -> None:
        """LISTEN for enqueues of our queues so idle workers start at once, not at the next poll.

        Polling stays as the fallback: a lost notification only delays work by poll_interval.
        """
        wanted = {q[:NOTIFY_QUEUE_CHARS] for q in self.config.queues}
        stopping, announced, wake = self.signals.stopping, self.signals.announced, self.ledger.wake
        failures = 0
        while not stopping.is_set():
            try:
                with self.store().listen() as notifications:
                    failures = 0
                    # Anything enqueued before LISTEN took effect was not announced: look once,
                    # from the queues' heads.
                    announced.set()
                    wake.set()
                    self.signals.listening.set()
                    for payload in notifications(lambda: stopping.is_set()):
                        if payload in wanted:
                            announced.set()
                            wake.set()
            except ConnectionFailed as exc:
                failures += 1
                log.debug("worker %s: listen: %s", self.worker_id, exc)
                stopping.wait(reconnect_delay(failures, base=0.5))

    def heartbeat_loop(self) -> None:
        every = self.config.heartbeat.total_seconds()
        while not self.signals.closed.wait(every):
            self.beat()

    def beat(self) -> None:
        """Renew every held lease in one statement; leases not renewed are lost."""
        ledger = self.ledger
        held = [c for c in ledger.held_now() if not c.lost]
        sent = time.monotonic()
        try:
            store = self.store()
            store.worker_seen(self.worker_id)
            # Each lease carries its handler's latest progress, when it reported any since.
            progress = [c.progress_due() for c in held]
            renewed = self.renew(store, held, progress)
        except ConnectionFailed as exc:
            log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
            now = time.monotonic()
            for ctx in held:
                if now >= ctx.deadline:
                    ledger.mark_lost(ctx, "could not heartbeat before the lease lapsed")
            return
        refused = []
        for ctx, reported in zip(held, progress, strict=True):
            if ctx.job.id in renewed:
                ctx.deadline = sent + self.config.lease_ttl.total_seconds()
                if reported is not None:
                    ctx._progress_sent = reported
            elif not ctx.finishing:
                # (A job whose result was written meanwhile is not renewed either: not lost.)
                refused.append(ctx)
        if not refused:
            return
        # Cancelled by an operator, or not: one read, only when a heartbeat was refused.
        try:
            cancelled = store.cancelled([ctx.job.id for ctx in refused])
        except ConnectionFailed:
            cancelled = set()
        for ctx in refused:
            if ctx.job.id in cancelled:
                ledger.mark_lost(ctx, "heartbeat rejected: the job was cancelled by an operator")
            else:
                # (Taken over, requeued or marked stuck by an operator, or lapsed in a queue
                # with a concurrency cap, which renews no lapsed lease.)
                ledger.mark_lost(ctx, "heartbeat rejected: the lease is no longer this worker's")

    def renew(
        self,
        store: WorkerStore,
        held: list[LeaseContext],
        progress: list[tuple[float, str | None] | None],
    ) -> dict[int, Any]:
        """The heartbeat statement. A report the database refuses (a message its encoding
        cannot hold: the handler's text is untrusted) must not cost the leases: the heartbeat
        goes again without the reports, which are dropped (logged once each)."""
        leases = [c.lease for c in held]
        ttl = self.config.lease_ttl
        if not any(progress):
            return store.heartbeat(leases, ttl)
        try:
            return store.heartbeat(leases, ttl, progress=progress)
        except ConnectionFailed:
            raise
        except LeasectlError as exc:
            for ctx, reported in zip(held, progress, strict=True):
                if reported is not None:
                    ctx._progress_sent = reported  # (not sent again)
            log.warning("worker %s: progress not written: %s", self.worker_id, exc)
            progress[:] = [None] * len(progress)
            return store.heartbeat(leases, ttl)

    def deadline_loop(self) -> None:
        """Cancel handlers whose lease lapsed without a successful heartbeat.

        Independent of any database call in flight: when the server is unreachable, a blocked
        heartbeat must not delay the moment a handler learns it may no longer hold its job.
        """
        tick = min(0.1, self.config.lease_ttl.total_seconds() / 10)
        while not self.signals.closed.wait(tick):
            now = time.monotonic()
            for ctx in self.ledger.held_now():
                if ctx.lost or ctx.finishing:
                    continue
                if now >= ctx.deadline:
                    self.ledger.mark_lost(ctx, "no heartbeat got through before the lease lapsed")
                elif now >= ctx.timeout_at and not ctx.timed_out:
                    self.ledger.time_out(ctx)
