"""leasectl: a leased-job queue on PostgreSQL, its worker runtime, CLI and console.

A handler module needs only ``from leasectl import JobContext, PermanentError`` (and
``LeaseLost``, raised by ``with ctx.transaction()`` when the job's lease was lost). The layers:
``leasectl.core`` (models, errors, configuration), ``leasectl.db`` (the data layer),
``leasectl.runtime`` (worker, watcher), ``leasectl.present`` (Rich output), ``leasectl.cli``,
``leasectl.console``, ``leasectl.demo``; docs/architecture.md has the map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from leasectl.core.errors import LeaseLost

if TYPE_CHECKING:
    from leasectl.runtime.worker import JobContext, PermanentError

__all__ = ["JobContext", "LeaseLost", "PermanentError"]


def __getattr__(name: str) -> Any:
    # Lazy: importing leasectl.core must not load the worker runtime and psycopg.
    if name in ("JobContext", "PermanentError"):
        from leasectl.runtime import worker

        return getattr(worker, name)
    raise AttributeError(f"module 'leasectl' has no attribute {name!r}")
