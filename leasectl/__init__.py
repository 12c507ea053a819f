"""leasectl: a leased-job queue on PostgreSQL, its worker runtime, CLI and console.

A handler module needs only ``from leasectl import JobContext, PermanentError`` (and
``LeaseLost``, raised by ``with ctx.transaction()`` when the job's lease was lost); an
``async def`` handler takes an ``AsyncJobContext`` instead. An
application enqueues inside its own transaction with ``leasectl.enqueue(conn, queue=...,
payload=...)`` (``enqueue_many``, and ``enqueue_async``/``enqueue_many_async`` on an
``AsyncConnection``): README, "Enqueue inside your transaction". The layers: ``leasectl.core``
(models, errors, configuration), ``leasectl.db`` (the data layer), ``leasectl.runtime`` (worker,
watcher), ``leasectl.present`` (Rich output), ``leasectl.cli``, ``leasectl.console``,
``leasectl.demo``; docs/architecture.md has the map.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from leasectl.core.errors import LeaseLost

if TYPE_CHECKING:
    from leasectl.core.enqueue import Enqueued, NewJob
    from leasectl.core.errors import LeasectlError, UsageError
    from leasectl.db.producer import enqueue, enqueue_async, enqueue_many, enqueue_many_async
    from leasectl.runtime.worker import (
        AsyncJobContext,
        JobContext,
        JobTimedOut,
        PermanentError,
        Snooze,
    )

# Lazy: importing leasectl.core must not load the worker runtime and psycopg.
_WHERE = {
    "AsyncJobContext": "leasectl.runtime.worker",
    "JobContext": "leasectl.runtime.worker",
    "PermanentError": "leasectl.runtime.worker",
    "Snooze": "leasectl.runtime.worker",
    "JobTimedOut": "leasectl.runtime.worker",
    "enqueue": "leasectl.db.producer",
    "enqueue_many": "leasectl.db.producer",
    "enqueue_async": "leasectl.db.producer",
    "enqueue_many_async": "leasectl.db.producer",
    "NewJob": "leasectl.core.enqueue",
    "Enqueued": "leasectl.core.enqueue",
    "LeasectlError": "leasectl.core.errors",
    "UsageError": "leasectl.core.errors",
}

__all__ = [
    "AsyncJobContext",
    "Enqueued",
    "JobContext",
    "JobTimedOut",
    "LeaseLost",
    "LeasectlError",
    "NewJob",
    "PermanentError",
    "Snooze",
    "UsageError",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'leasectl' has no attribute {name!r}")
