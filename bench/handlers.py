"""Job handlers for the benchmarks, run by real `leasectl worker --handler` processes."""

from __future__ import annotations

from leasectl.runtime.worker import JobContext


def noop(ctx: JobContext) -> None:
    """The job does nothing: the benchmark measures the queue, not the work."""
