"""A worker's shutdown: running handlers finish within ``--grace`` (heartbeats go on meanwhile)
and their results are written; what is left is released, and the stop is recorded."""

from __future__ import annotations

import logging
import threading
import time

from leasectl.core.errors import ConnectionFailed, LeasectlError
from leasectl.db.work import WorkerStore
from leasectl.runtime.worker.config import WorkerConfig
from leasectl.runtime.worker.context import LeaseContext
from leasectl.runtime.worker.ledger import Ledger

log = logging.getLogger("leasectl.worker")


def shut_down(
    config: WorkerConfig,
    ledger: Ledger,
    store: WorkerStore,
    closed: threading.Event,
    unwritten: list[LeaseContext],
) -> None:
    """Let running handlers finish within the grace period, writing their results, then
    release what is left."""
    worker_id = config.worker_id
    deadline = time.monotonic() + config.grace.total_seconds()
    finished = unwritten
    while True:
        ledger.wake.clear()
        with ledger.lock:
            finished += ledger.finished
            ledger.finished.clear()
            running = ledger.running
        if finished:
            write_finished(ledger, store, closed, finished, deadline)
            finished = []
        if running == 0 or time.monotonic() >= deadline:
            break
        ledger.wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
    leftover = [c for c in ledger.held_now() if not c.lost]
    for ctx in leftover:
        ctx.lost = True  # never write a result for a job we hand back
        ctx._set_cancelled()
    if leftover:
        try:
            released = store.release([c.lease for c in leftover])
            ledger.stats.released += len(released)
            log.info("worker %s: released %d unfinished jobs", worker_id, len(released))
        except LeasectlError as exc:
            log.warning("worker %s: could not release: %s", worker_id, exc)
    try:
        store.worker_stopped(worker_id)
    except LeasectlError as exc:
        log.warning("worker %s: could not record the stop: %s", worker_id, exc)
    log.info("worker %s stopped: %s", worker_id, ledger.stats)


def write_finished(
    ledger: Ledger,
    store: WorkerStore,
    closed: threading.Event,
    finished: list[LeaseContext],
    deadline: float,
) -> None:
    """Write results outside the dispatch loop (shutdown): retry until written or lost."""
    while finished:
        finished = ledger.drop_lost(finished)
        if not finished:
            return
        try:
            accepted = store.complete([c.lease for c in finished])
        except ConnectionFailed as exc:
            ledger.lost_past_deadline(finished, exc, grace_end=deadline)
            closed.wait(0.5)
            continue
        ledger.written(finished, {c.job.id for c in finished} - accepted)
        return
