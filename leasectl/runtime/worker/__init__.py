"""The worker runtime: claim loop, background heartbeats, fenced completion, graceful shutdown.

Threads: the dispatcher (the caller's), which completes the jobs that finished and claims new
ones in one statement per round trip; one heartbeat thread that renews every held lease in one
statement; a LISTEN thread that wakes the dispatcher on enqueues; a deadline thread; and
``concurrency`` handler threads (none at concurrency 1: the dispatcher runs the handler). A
handler learns that its lease is gone through ``JobContext.cancelled``; its result is then never
written (and the database would refuse it anyway: completion is fenced by owner and attempt).
A handler may instead complete its job inside its own transaction (``JobContext.transaction``):
its writes and the fenced completion commit together, on a connection of its own thread.
An ``async def`` handler replaces the handler threads with one event loop thread that runs
each job as a task (``AsyncJobContext``); everything else is the same.

The parts, a module each: ``context`` (the handler API), ``loading`` (``module:function`` to a
handler), ``config`` (``WorkerConfig``, the event loop, the store), ``ledger`` (the held leases
and the results waiting to be written), ``outcomes`` (how an attempt ends), ``executors`` and
``asyncio_executor`` (where handlers run, behind one interface), ``keepers`` (heartbeat, listen,
deadline), ``dispatch`` (the claim loop), ``shutdown``, and ``runner`` (``Worker``).
"""

from leasectl.runtime.worker.config import (
    CALL_BOUND_S,
    EVENT_LOOPS,
    WorkerConfig,
    new_event_loop,
    worker_store,
)
from leasectl.runtime.worker.context import (
    AsyncHandler,
    AsyncJobContext,
    Handler,
    JobContext,
    JobTimedOut,
    LeaseContext,
    PermanentError,
    Snooze,
    is_async_handler,
)
from leasectl.runtime.worker.ledger import WorkerStats
from leasectl.runtime.worker.loading import load_handler
from leasectl.runtime.worker.runner import Worker

__all__ = [
    "CALL_BOUND_S",
    "EVENT_LOOPS",
    "AsyncHandler",
    "AsyncJobContext",
    "Handler",
    "JobContext",
    "JobTimedOut",
    "LeaseContext",
    "PermanentError",
    "Snooze",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "is_async_handler",
    "load_handler",
    "new_event_loop",
    "worker_store",
]
