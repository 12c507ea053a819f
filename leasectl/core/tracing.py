"""OpenTelemetry tracing, optional (docs/tracing.md): an enqueue's PRODUCER span (``send
QUEUE``), whose context the job carries in its ``trace_context`` column (migration 28); a
claim's span (``claim QUEUE``, linked to the contexts of the jobs it leased); a handler's
CONSUMER span (``process QUEUE``), a child of the job's context, so that the trace the
application's request started goes on in the worker.

leasectl never imports OpenTelemetry itself: it traces once the process has imported its API
(``opentelemetry.trace``), which the application's tracing setup, a handler module's or
``opentelemetry-instrument``'s does. Until then every call here is a dictionary look-up and a
shared object that does nothing: no import, no span, no cost to speak of (BENCHMARKS.md). The
spans go to the API's global tracer provider, the one the application configures.

A stored trace context is untrusted (any producer role writes the column): a value that is
not a small JSON object of strings, or that the propagator cannot read, is ignored and the job
runs as any other, in a trace of its own.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext, Tracer

    from leasectl.core.enqueue import Enqueued
    from leasectl.core.models import Lease

# The column's bound (migration 28: varchar(1024)). A W3C traceparent is 55 characters and the
# specification asks propagators to keep at least 512 of a tracestate.
MAX_TRACE_CONTEXT_CHARS = 1024
MAX_CARRIER_KEYS = 8  # (traceparent, tracestate, baggage, and a few more propagators' headers)
# Links a claim's span carries at most (the SDK keeps 128 by default; a claim takes up to 1000).
MAX_CLAIM_LINKS = 128

SYSTEM = "leasectl"
_TRACER: Tracer | None = None


def _trace() -> ModuleType | None:
    """OpenTelemetry's trace API once the process has imported it, else None (never imported
    here: without it no span can be current, and no tracer provider configured)."""
    return sys.modules.get("opentelemetry.trace")


def _tracer(trace: ModuleType) -> Tracer:
    global _TRACER
    if _TRACER is None:
        # (The global provider's tracer; before the application sets one, a proxy that follows
        # it once it is set.)
        _TRACER = trace.get_tracer("leasectl")
    return _TRACER


def carrier_text(carrier: dict[str, str]) -> str | None:
    """What a job stores of a propagator's carrier: compact JSON within the column's bound
    (only the traceparent when the rest does not fit), or None (nothing to carry)."""
    if not carrier:
        return None
    text = json.dumps(carrier, separators=(",", ":"), sort_keys=True)
    if len(text) <= MAX_TRACE_CONTEXT_CHARS:
        return text
    parent = carrier.get("traceparent")
    if parent is not None:
        text = json.dumps({"traceparent": parent}, separators=(",", ":"))
        if len(text) <= MAX_TRACE_CONTEXT_CHARS:
            return text
    return None


def carrier_of(text: object) -> dict[str, str] | None:
    """A stored trace context as a carrier, or None when it is not one (untrusted text)."""
    if not isinstance(text, str) or not text or len(text) > MAX_TRACE_CONTEXT_CHARS:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or not 0 < len(value) <= MAX_CARRIER_KEYS:
        return None
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            return None
        # HTTP header values, printable ASCII (W3C): nothing else reaches the propagator, whose
        # warnings quote what it refuses into the worker's log.
        if not (key.isascii() and key.isprintable() and item.isascii() and item.isprintable()):
            return None
    return value


@functools.lru_cache(maxsize=256)
def _stored_context(text: str | None) -> Context | None:
    """The context a job's stored trace context names (a valid remote span in it), or None.
    (Kept for the last few: the claim's span and the handler's read each job's; a Context is
    immutable.)"""
    carrier = carrier_of(text)
    if carrier is None:
        return None
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context

    try:
        found = propagate.extract(carrier, context=Context())
        span_context = trace.get_current_span(found).get_span_context()
    except Exception:  # a propagator's own failure on hostile text: the job runs untraced
        return None
    return found if span_context.is_valid else None


def _span_context(context: Context) -> SpanContext:
    from opentelemetry import trace

    span_context: SpanContext = trace.get_current_span(context).get_span_context()
    return span_context


class Off:
    """Tracing off (the API never imported): every span here is this one, doing nothing."""

    on = False
    carrier: str | None = None

    def __enter__(self) -> Off:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sent(self, results: Sequence[Enqueued]) -> None:
        pass

    def ended(self, outcome: str, error: BaseException | None) -> None:
        pass


OFF = Off()


class SendSpan:
    """One enqueue call's PRODUCER span, current while its statements run; ``carrier`` is what
    every job of the call stores (None: no valid span, nothing stored)."""

    on = True

    def __init__(self, trace: ModuleType, queues: Sequence[str], count: int) -> None:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        if len(queues) == 1:
            attributes["messaging.destination.name"] = queues[0]
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        name = f"send {queues[0]}" if len(queues) == 1 else "send"
        self._trace = trace
        self.span: Span = _tracer(trace).start_span(
            name, kind=trace.SpanKind.PRODUCER, attributes=attributes
        )
        self.carrier: str | None = None
        self._current: Any = None

    def __enter__(self) -> SendSpan:
        from opentelemetry import propagate

        self._current = self._trace.use_span(self.span, end_on_exit=True)
        self._current.__enter__()
        carrier: dict[str, str] = {}
        try:
            propagate.inject(carrier)
        except Exception:  # (a propagator of the application's that fails: nothing carried)
            carrier = {}
        self.carrier = carrier_text(carrier)
        return self

    def __exit__(self, *exc: Any) -> None:
        # (use_span records the exception, sets the error status and ends the span.)
        self._current.__exit__(*exc)

    def sent(self, results: Sequence[Enqueued]) -> None:
        if len(results) == 1:
            self.span.set_attribute("messaging.message.id", str(results[0].id))
            if results[0].duplicate:
                self.span.set_attribute("leasectl.duplicate", True)

    def ended(self, outcome: str, error: BaseException | None) -> None:
        pass


def sending(queues: Callable[[], Sequence[str]], count: int) -> SendSpan | Off:
    """The span of an enqueue of ``count`` jobs to the ``queues()`` (asked only when the
    process traces: OFF until then)."""
    trace = _trace()
    if trace is None:
        return OFF
    return SendSpan(trace, queues(), count)


class ProcessSpan:
    """A handler's CONSUMER span, current while it runs: a child of the job's stored context
    (a trace of its own without one, never a child of whatever is current where it runs)."""

    on = True

    def __init__(self, trace: ModuleType, lease: Lease) -> None:
        from opentelemetry.context import Context

        job = lease.job
        parent = _stored_context(lease.trace_context)
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "messaging.client.id": lease.owner,
            "leasectl.attempt": lease.attempt,
        }
        self._trace = trace
        self.span: Span = _tracer(trace).start_span(
            f"process {job.queue}",
            context=Context() if parent is None else parent,
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
        )
        self._current: Any = None

    def __enter__(self) -> ProcessSpan:
        # (Errors are recorded by ``ended``: the handler's exception never passes through here.)
        self._current = self._trace.use_span(
            self.span, end_on_exit=True, record_exception=False, set_status_on_exception=False
        )
        self._current.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._current.__exit__(*exc)

    def sent(self, results: Sequence[Enqueued]) -> None:
        pass

    def ended(self, outcome: str, error: BaseException | None) -> None:
        """How the attempt ended (``leasectl.outcome``); a failure's exception recorded."""
        span = self.span
        span.set_attribute("leasectl.outcome", outcome)
        if error is not None and outcome in ("failed", "timed out"):
            from opentelemetry.trace import Status, StatusCode

            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))


def processing(lease: Lease) -> ProcessSpan | Off:
    """The span of a handler's run of ``lease``'s job (OFF until the process traces)."""
    trace = _trace()
    if trace is None:
        return OFF
    return ProcessSpan(trace, lease)


def clock() -> int | None:
    """Now (ns since the epoch, as spans are timed) when the process traces, else None: the
    start of a claim, whose span is made once it is known to have leased something."""
    return None if _trace() is None else time.time_ns()


def claimed(queue: str, owner: str, started: int, leases: Sequence[Lease]) -> None:
    """The span of one claim statement that leased ``leases`` (none: no span, so that an idle
    worker's polls add none), linked to the jobs' stored contexts."""
    trace = _trace()
    if trace is None or not leases:
        return
    links: list[Link] = []
    for lease in leases[:MAX_CLAIM_LINKS]:
        context = _stored_context(lease.trace_context)
        if context is not None:
            links.append(
                trace.Link(_span_context(context), {"messaging.message.id": str(lease.job.id)})
            )
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "receive",
        "messaging.operation.name": "claim",
        "messaging.destination.name": queue,
        "messaging.client.id": owner,
        "messaging.batch.message_count": len(leases),
    }
    span = _tracer(trace).start_span(
        f"claim {queue}",
        kind=trace.SpanKind.CLIENT,
        attributes=attributes,
        links=links,
        start_time=started,
    )
    span.end()


__all__ = [
    "MAX_TRACE_CONTEXT_CHARS",
    "OFF",
    "Off",
    "ProcessSpan",
    "SendSpan",
    "carrier_of",
    "carrier_text",
    "claimed",
    "clock",
    "processing",
    "sending",
]
