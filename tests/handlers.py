"""Job handlers used by tests that run real worker processes."""

from __future__ import annotations

import time
from pathlib import Path

from leasectl.runtime.worker import JobContext, PermanentError


def noop(ctx: JobContext) -> None:
    return None


def block(ctx: JobContext) -> None:
    """Hold the lease until cancelled (lease lost or shutdown), at most a minute."""
    ctx.cancelled.wait(60)


def sleep_ignoring_cancel(ctx: JobContext) -> None:
    """A handler that never looks at its lease: fencing alone must stop its result."""
    seconds = float(ctx.payload.get("seconds", 2.0)) if isinstance(ctx.payload, dict) else 2.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def boom(ctx: JobContext) -> None:
    raise RuntimeError(f"boom on attempt {ctx.lease.attempt}")


def permanent(ctx: JobContext) -> None:
    raise PermanentError("bad payload")


def hold_until_lost(ctx: JobContext) -> None:
    """First attempt: hold the lease until told it is lost, then write (atomically) to the
    payload's ``dir`` when that was on this process's monotonic clock and the lease deadline the
    worker gave; later attempts succeed. For tests that watch a worker process from outside."""
    if ctx.lease.attempt > 1:
        return
    out = Path(ctx.payload["dir"])
    (out / "started").write_text(ctx.lease.owner)
    if ctx.cancelled.wait(60):
        cancelled_at = time.monotonic()
        tmp = out / "cancelled.tmp"
        tmp.write_text(f"{cancelled_at} {ctx.deadline}")
        tmp.replace(out / "cancelled")
        raise RuntimeError("cancelled: the lease is presumed lost")


def brief(ctx: JobContext) -> None:
    """A job that takes a little while (20 ms): a drain with jobs in flight at any moment."""
    time.sleep(0.02)


def raise_message(ctx: JobContext) -> None:
    """Fail with the payload's ``message``, two frames down (a traceback with frames to keep);
    ``<NUL>`` in it becomes the character no jsonb (the payload) nor text value holds."""
    _parse_invoice(ctx.payload["message"].replace("<NUL>", "\x00"))


def _parse_invoice(message: str) -> None:
    _check_totals(message)


def _check_totals(message: str) -> None:
    raise ValueError(message)


def succeed_once_cancelled(ctx: JobContext) -> None:
    """Write ``started`` to the payload's ``dir``, wait (at most a minute) for ``ctx.cancelled``,
    write ``cancelled`` (the monotonic time it saw it) and return normally: a success the
    worker must not write, since the job was cancelled under it."""
    out = Path(ctx.payload["dir"])
    (out / "started").write_text(f"{time.monotonic()}")
    if ctx.cancelled.wait(60):
        tmp = out / "cancelled.tmp"
        tmp.write_text(f"{time.monotonic()}")
        tmp.replace(out / "cancelled")


def capture_in_transaction(ctx: JobContext) -> None:
    """Write the job's row of ``public.captured`` and complete it in one transaction. The first
    attempt then says so (a file ``inside`` in the payload's ``dir``) and holds the transaction
    open until its lease is lost, for a test that kills the worker there."""
    with ctx.transaction() as conn:
        conn.execute(
            "INSERT INTO public.captured (job_id, attempt, worker) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.lease.attempt, ctx.lease.owner),
        )
        if ctx.lease.attempt == 1:
            (Path(ctx.payload["dir"]) / "inside").write_text(ctx.lease.owner)
            ctx.cancelled.wait(60)
