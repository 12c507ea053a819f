"""Job handlers used by tests that run real worker processes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

from leasectl.runtime.worker import AsyncJobContext, JobContext, PermanentError


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


# -- async def handlers (one event loop per worker) -------------------------------------------

_arrived: list[int] = []
_all_here = asyncio.Event()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


async def noop_async(ctx: AsyncJobContext) -> None:
    return None


async def rendezvous(ctx: AsyncJobContext) -> None:
    """Wait (at most 30 s) until the payload's ``n`` jobs are all inside this handler at once,
    then write which thread ran this one and which threads the process had, to ``dir``."""
    _arrived.append(ctx.job.id)
    if len(_arrived) >= int(ctx.payload["n"]):
        _all_here.set()
    await asyncio.wait_for(_all_here.wait(), 30)
    seen = {
        "thread": threading.current_thread().name,
        "ident": threading.get_ident(),
        "threads": sorted(t.name for t in threading.enumerate()),
        "arrived": len(_arrived),
        "loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
    }
    _write(Path(ctx.payload["dir"]) / str(ctx.job.id), json.dumps(seen))


async def boom_async(ctx: AsyncJobContext) -> None:
    await asyncio.sleep(0)
    await _charge_async(ctx.lease.attempt)


async def _charge_async(attempt: int) -> None:
    raise RuntimeError(f"async boom on attempt {attempt}")


async def permanent_async(ctx: AsyncJobContext) -> None:
    raise PermanentError("bad payload (async)")


async def succeed_once_cancelled_async(ctx: AsyncJobContext) -> None:
    """``succeed_once_cancelled`` awaiting ``ctx.cancelled`` (``await ctx.cancelled`` itself, or
    ``.wait()`` when the payload says ``"wait"``); writes ``is_cancelled()`` too."""
    out = Path(ctx.payload["dir"])
    _write(out / "started", ctx.lease.owner)
    waiting = ctx.cancelled.wait() if ctx.payload.get("wait") else ctx.cancelled
    await asyncio.wait_for(waiting, 60)
    _write(out / "cancelled", json.dumps({"is_cancelled": ctx.is_cancelled()}))


async def ignore_cancelled(ctx: AsyncJobContext) -> None:
    """With ``hold`` in the payload: never look at ``ctx.cancelled`` (sleep a minute); write
    ``task-cancelled`` to ``dir`` when the worker cancels the task. Else return at once."""
    if not ctx.payload.get("hold"):
        return
    out = Path(ctx.payload["dir"])
    _write(out / "started", ctx.lease.owner)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _write(out / "task-cancelled", json.dumps({"is_cancelled": ctx.is_cancelled()}))
        raise


async def sleep_async(ctx: AsyncJobContext) -> None:
    """Sleep the payload's ``seconds`` (on the loop), ignoring ``ctx.cancelled``."""
    await asyncio.sleep(float(ctx.payload.get("seconds", 0.5)))


async def capture_in_transaction_async(ctx: AsyncJobContext) -> None:
    """``capture_in_transaction`` with ``async with ctx.transaction()``; with ``hold`` in the
    payload, say so (``inside`` in ``dir``) and stay in the transaction until cancelled."""
    async with ctx.transaction() as conn:
        await conn.execute(
            "INSERT INTO public.captured (job_id, attempt, worker) VALUES (%s, %s, %s)",
            (ctx.job.id, ctx.lease.attempt, ctx.lease.owner),
        )
        if ctx.payload.get("hold"):
            _write(Path(ctx.payload["dir"]) / "inside", ctx.lease.owner)
            await asyncio.sleep(60)


async def exit_async(ctx: AsyncJobContext) -> None:
    """``sys.exit(3)`` in a task (the payload says which jobs): one failed attempt, no more."""
    if isinstance(ctx.payload, dict) and ctx.payload.get("exit"):
        raise SystemExit(3)
    await asyncio.sleep(0)
