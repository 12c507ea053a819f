"""The demo fleet's job handler: the payload says how long to work and how often to fail.

Payload keys (all optional): ``seconds`` of work; ``fail_attempts``, the number of first
attempts that fail after half the work (retries with backoff; more than max_attempts ends
Failed); ``poison``, fail at once on every attempt (the demo's scripted operator quarantines
such a job as Stuck). The work is a wait on ``ctx.cancelled``: a lost lease or a shutdown stops
it at once, and the runtime then writes no result.
"""

from __future__ import annotations

from typing import Any

from leasectl.runtime.worker import JobContext

MAX_SECONDS = 120.0


class UpstreamTimeout(Exception):
    """A transient failure: the job is retried with backoff."""


class PoisonPayload(Exception):
    """A failure that will repeat on every attempt, however often the job is retried."""


def handle(ctx: JobContext) -> None:
    payload: dict[str, Any] = ctx.payload if isinstance(ctx.payload, dict) else {}
    if payload.get("poison"):
        raise PoisonPayload(
            f"cannot render template {payload.get('template', '?')!r}: "
            "field 'amount' is missing from the payload"
        )
    seconds = min(max(float(payload.get("seconds", 1.0)), 0.0), MAX_SECONDS)
    failing = ctx.lease.attempt <= int(payload.get("fail_attempts", 0))
    if ctx.cancelled.wait(seconds / 2 if failing else seconds):
        return  # lease lost or shutting down: stop working; nothing will be written
    if failing:
        raise UpstreamTimeout(
            f"{ctx.job.queue}: upstream timed out after {seconds / 2:.1f}s "
            f"(attempt {ctx.lease.attempt} of {ctx.job.max_attempts})"
        )
