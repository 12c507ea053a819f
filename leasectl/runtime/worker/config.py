"""A worker's configuration (validated once), its event loop, and the one way its store is built."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from leasectl.core.config import check_queue_length, default_worker_id
from leasectl.core.errors import UsageError
from leasectl.core.readlag import DEFAULT_LEASE_TTL
from leasectl.db.connection import Database
from leasectl.db.work import WorkerStore

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def new_event_loop(choice: str) -> tuple[asyncio.AbstractEventLoop, str]:
    """The loop an async def handler's tasks run on, and its name. uvloop's call_soon and
    Handle are C, not Python: a task costs a few microseconds less. ``auto`` takes it when it is
    installed (by default, but on Windows); ``uvloop`` requires it; ``asyncio``: the default."""
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise UsageError(
                    "--event-loop uvloop: uvloop is not installed (pip install uvloop)"
                ) from None
        else:
            return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 1
    lease_ttl: timedelta = DEFAULT_LEASE_TTL
    heartbeat_every: timedelta | None = None  # default: a third of the lease TTL
    poll_interval: timedelta = timedelta(seconds=1)
    grace: timedelta = timedelta(seconds=30)
    worker_id: str = field(default_factory=default_worker_id)
    retry_base: timedelta = timedelta(seconds=1)
    retry_cap: timedelta = timedelta(hours=1)
    # An async def handler's event loop: "uvloop" when it is installed ("auto"), or asyncio's.
    event_loop: str = "auto"

    def __post_init__(self) -> None:
        if self.event_loop not in EVENT_LOOPS:
            raise UsageError(f"--event-loop must be one of {', '.join(EVENT_LOOPS)}")
        if not self.queues:
            raise UsageError("give at least one --queue")
        for name in self.queues:
            check_queue_length(name, "--queue")
        if not 1 <= self.concurrency <= 1000:
            raise UsageError("--concurrency must be between 1 and 1000")
        if self.lease_ttl < timedelta(milliseconds=100):
            raise UsageError("--lease-ttl must be at least 100ms")
        if self.heartbeat >= self.lease_ttl:
            raise UsageError(
                f"--heartbeat-every ({self.heartbeat.total_seconds():g}s) must be shorter than "
                f"--lease-ttl ({self.lease_ttl.total_seconds():g}s), or the lease lapses "
                "between heartbeats"
            )
        if self.heartbeat <= timedelta(0):
            raise UsageError("--heartbeat-every must be greater than zero")

    @property
    def heartbeat(self) -> timedelta:
        return self.heartbeat_every if self.heartbeat_every is not None else self.lease_ttl / 3


# The longest a worker's call waits for the server before it reconnects.
CALL_BOUND_S = 20.0


def worker_store(dsn: str, schema: str, config: WorkerConfig) -> WorkerStore:
    """The one way a worker's store is built (`leasectl worker`, tests and benchmarks alike)."""
    db = Database.connect(
        dsn,
        schema,
        max_size=min(config.concurrency, 8) + 3,
        application_name=f"leasectl worker {config.worker_id}"[:63],
        # A call waiting for a connection gives up within a heartbeat interval, so an outage
        # is noticed (and retried) at the pace of heartbeats.
        pool_timeout=max(0.5, config.heartbeat.total_seconds()),
        generic_plans=True,
        # A call unanswered for a lease's length is of no use (its leases lapsed meanwhile).
        call_bound=min(config.lease_ttl.total_seconds(), CALL_BOUND_S),
    )
    return WorkerStore(db)
