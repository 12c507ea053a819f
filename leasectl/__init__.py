"""leasectl: a leased-job queue on PostgreSQL, its worker runtime, CLI and console.

A handler module needs only ``from leasectl import JobContext, PermanentError``. The layers:
``leasectl.core`` (models, errors, configuration), ``leasectl.db`` (the data layer),
``leasectl.runtime`` (worker, watcher), ``leasectl.present`` (Rich output), ``leasectl.cli``,
``leasectl.console``, ``leasectl.demo``; docs/architecture.md has the map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasectl.runtime.worker import JobContext, PermanentError

__all__ = ["JobContext", "PermanentError"]


def __getattr__(name: str) -> Any:
    # Lazy: importing leasectl.core must not load the worker runtime and psycopg.
    if name in __all__:
        from leasectl.runtime import worker

        return getattr(worker, name)
    raise AttributeError(f"module 'leasectl' has no attribute {name!r}")
