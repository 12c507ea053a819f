"""Tracing (docs/tracing.md) with the OpenTelemetry SDK's InMemorySpanExporter: an enqueue's
PRODUCER span, whose context the job stores; the claim's span, linked to it; the handler's
CONSUMER span, its child, with its outcome; sync and async handlers, drained in-process or run
by a worker; a stored context that is not one is ignored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import leasectl
from leasectl import AsyncJobContext, JobContext, NewJob, PermanentError
from leasectl.core.tracing import MAX_TRACE_CONTEXT_CHARS
from leasectl.runtime.worker import WorkerConfig
from leasectl.testing import Outcome, drain
from tests.hostile import CORPUS
from tests.tracing import collecting, named, one
from tests.util import wait_until

Q = "mail"
NOW = WorkerConfig(retry_base=timedelta(0))  # a failure's retry due at once
tracer = trace.get_tracer("tests")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from collecting()


def stored(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("SELECT trace_context FROM leasectl.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    value: str | None = row[0]
    return value


def hexes(span: ReadableSpan) -> tuple[str, str]:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def handle(ctx: JobContext) -> None:
    to = ctx.payload["to"]
    if to == "bounce":
        raise ValueError("mailbox full")
    if to == "nobody":
        raise PermanentError("no such user")
    if to == "later":
        ctx.snooze(3600)
    if to == "slow":
        ctx.cancelled.wait(30)  # told at its timeout (1 s)
    with tracer.start_as_current_span("inside"):
        pass


def test_the_handler_span_continues_the_enqueue_trace(
    db_dsn: str, sql_conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    with psycopg.connect(db_dsn) as conn, tracer.start_as_current_span("request") as request:
        job = leasectl.enqueue(conn, queue=Q, payload={"to": "ada"})
        conn.commit()
    send = one(spans.get_finished_spans(), f"send {Q}")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert dict(send.attributes or {}) == {
        "messaging.system": "leasectl",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": Q,
        "messaging.message.id": str(job.id),
    }
    trace_id, send_id = hexes(send)
    carried = json.loads(stored(sql_conn, job.id) or "")
    assert carried["traceparent"].startswith(f"00-{trace_id}-{send_id}-")

    runs = drain(db_dsn, Q, handle)
    assert runs.outcomes() == {job.id: Outcome.COMPLETED}
    finished = spans.get_finished_spans()
    process = one(finished, f"process {Q}")
    assert process.kind is SpanKind.CONSUMER
    assert hexes(process)[0] == trace_id  # the same trace
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    attributes = dict(process.attributes or {})
    assert attributes["messaging.system"] == "leasectl"
    assert attributes["messaging.destination.name"] == Q
    assert attributes["messaging.message.id"] == str(job.id)
    assert attributes["leasectl.attempt"] == 1
    assert attributes["leasectl.outcome"] == "completed"
    assert process.status.status_code is StatusCode.UNSET
    # What the handler traces is a child of its span.
    inside = one(finished, "inside")
    assert inside.parent is not None and inside.parent.span_id == process.context.span_id
    # The claim's span: one per statement that leased jobs, linked to their contexts.
    claim = one(finished, f"claim {Q}")
    assert claim.kind is SpanKind.CLIENT
    assert (claim.attributes or {})["messaging.batch.message_count"] == 1
    assert [link.context.span_id for link in claim.links] == [send.context.span_id]


def test_outcomes_failed_snoozed_timed_out_and_the_exception_recorded(
    db_dsn: str, spans: InMemorySpanExporter
) -> None:
    with psycopg.connect(db_dsn) as conn, tracer.start_as_current_span("request"):
        jobs = leasectl.enqueue_many(
            conn,
            [
                NewJob({"to": "bounce"}, queue=Q, max_attempts=2),
                NewJob({"to": "nobody"}, queue=Q),
                NewJob({"to": "later"}, queue=Q),
                NewJob({"to": "slow"}, queue=Q, max_attempts=1, timeout=timedelta(seconds=1)),
            ],
        )
        conn.commit()
    send = one(spans.get_finished_spans(), f"send {Q}")
    assert (send.attributes or {})["messaging.batch.message_count"] == 4
    drain(db_dsn, Q, handle, config=NOW)
    by_job: dict[str, list[ReadableSpan]] = {}
    for span in named(spans.get_finished_spans(), f"process {Q}"):
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        by_job.setdefault(str((span.attributes or {})["messaging.message.id"]), []).append(span)
    bounce, nobody, later, slow = (by_job[str(j.id)] for j in jobs)
    outcomes = [(s.attributes or {})["leasectl.outcome"] for s in bounce]
    assert outcomes == ["failed", "failed"]
    assert [(s.attributes or {})["leasectl.attempt"] for s in bounce] == [1, 2]
    for span in bounce:
        assert span.status.status_code is StatusCode.ERROR
        [event] = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "ValueError"
        assert (event.attributes or {})["exception.message"] == "mailbox full"
    [permanent] = nobody
    assert (permanent.attributes or {})["leasectl.outcome"] == "failed"
    [snoozed] = later
    assert (snoozed.attributes or {})["leasectl.outcome"] == "snoozed"
    assert snoozed.status.status_code is StatusCode.UNSET and not snoozed.events
    [timed_out] = slow
    assert (timed_out.attributes or {})["leasectl.outcome"] == "timed out"
    assert timed_out.status.status_code is StatusCode.ERROR
    assert timed_out.events[0].attributes is not None
    assert timed_out.events[0].attributes["exception.type"].endswith("JobTimedOut")


async def handle_async(ctx: AsyncJobContext) -> None:
    await asyncio.sleep(0)
    with tracer.start_as_current_span("inside"):
        await asyncio.sleep(0)
    if ctx.payload["to"] == "bounce":
        raise ValueError("mailbox full")


def test_async_handlers_and_enqueues_are_traced_alike(
    db_dsn: str, spans: InMemorySpanExporter
) -> None:
    async def produce() -> list[leasectl.Enqueued]:
        async with await psycopg.AsyncConnection.connect(db_dsn) as conn:
            with tracer.start_as_current_span("request"):
                one_job = await leasectl.enqueue_async(conn, queue=Q, payload={"to": "ada"})
                more = await leasectl.enqueue_many_async(
                    conn, [NewJob({"to": "bounce"}, queue=Q, max_attempts=1)]
                )
            await conn.commit()
        return [one_job, *more]

    ada, bounce = asyncio.run(produce())
    sends = named(spans.get_finished_spans(), f"send {Q}")
    assert len(sends) == 2
    runs = drain(db_dsn, Q, handle_async, config=NOW)
    assert runs.outcomes()[ada.id] is Outcome.COMPLETED
    finished = spans.get_finished_spans()
    processes = {
        (s.attributes or {})["messaging.message.id"]: s for s in named(finished, f"process {Q}")
    }
    for job, send in zip((ada, bounce), sends, strict=True):
        span = processes[str(job.id)]
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert span.context.trace_id == send.context.trace_id
    assert (processes[str(ada.id)].attributes or {})["leasectl.outcome"] == "completed"
    assert (processes[str(bounce.id)].attributes or {})["leasectl.outcome"] == "failed"
    # Each task's handler span is current in its task only.
    insides = named(finished, "inside")
    parents = {s.parent.span_id for s in insides if s.parent is not None}
    assert parents == {s.context.span_id for s in processes.values()}


def test_a_worker_on_handler_threads_continues_each_jobs_trace(
    db_dsn: str, run_worker: Any, sql_conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    sends = {}
    with psycopg.connect(db_dsn) as conn:
        for n in range(6):
            with tracer.start_as_current_span(f"request {n}"):
                job = leasectl.enqueue(conn, queue=Q, payload={"to": f"user {n}"})
                sends[str(job.id)] = one(spans.get_finished_spans(), f"send {Q}").context
                spans.clear()
        conn.commit()
    run_worker(handle, queues=(Q,), concurrency=3)
    processes = wait_until(
        lambda: (
            (found := named(spans.get_finished_spans(), f"process {Q}"))
            and len(found) == 6
            and found
        ),
        what="six handler spans",
    )
    assert len({s.context.trace_id for s in processes}) == 6
    for span in processes:
        send = sends[str((span.attributes or {})["messaging.message.id"])]
        assert span.parent is not None and span.parent.span_id == send.span_id
        assert span.context.trace_id == send.trace_id
        assert (span.attributes or {})["leasectl.outcome"] == "completed"


# Stored contexts that are not one: each job must run, untraced by it (a trace of its own).
VALID = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOT_CONTEXTS = [
    *(text[:MAX_TRACE_CONTEXT_CHARS] for text in CORPUS),
    "{",
    "null",
    '"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"',
    "[" * 500 + "]" * 500,
    '{"traceparent": 5}',
    '{"traceparent": {"traceparent": "x"}}',
    '{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}',
    '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\\u001b"}',
    '{"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
    json.dumps({"TRACEPARENT": VALID}),
    json.dumps({f"k{n}": VALID for n in range(9)} | {"traceparent": VALID}),
    '{"traceparent": "\\u001b[2J' + "x" * 900 + '"}',
]


def test_a_stored_context_that_is_not_one_is_ignored(
    db_dsn: str, sql_conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    ids = [j.id for j in leasectl.enqueue_many(sql_conn, [NewJob({"to": "x"}, queue=Q)] * 3)]
    # Written as a producer role may write the column, within its bound.
    hostile = [*NOT_CONTEXTS, json.dumps({"traceparent": VALID, "tracestate": "\x1b]0;PWN\x07"})]
    with sql_conn.transaction():
        ids = [
            j.id
            for j in leasectl.enqueue_many(sql_conn, [NewJob({"to": "x"}, queue=Q)] * len(hostile))
        ]
        for job_id, text in zip(ids, hostile, strict=True):
            sql_conn.execute(
                "UPDATE leasectl.jobs SET trace_context = %s WHERE id = %s", [text, job_id]
            )
    with pytest.raises(psycopg.errors.StringDataRightTruncation):
        sql_conn.execute("UPDATE leasectl.jobs SET trace_context = repeat('x', 1025)")
    runs = drain(db_dsn, Q, handle, max_jobs=1000)
    assert set(runs.outcomes().values()) == {Outcome.COMPLETED}
    assert len(runs.outcomes()) == len(hostile) + 3
    processes = {
        int((s.attributes or {})["messaging.message.id"]): s
        for s in named(spans.get_finished_spans(), f"process {Q}")
    }
    valid_trace = int(VALID.split("-")[1], 16)
    for job_id in ids:
        assert processes[job_id].parent is None, stored(sql_conn, job_id)
        assert processes[job_id].context.trace_id != valid_trace
    # A valid traceparent beside a tracestate of control characters: all of it is ignored (the
    # propagator would quote them in its warnings, into the worker's log).
    assert processes[ids[-1]].parent is None


def test_no_span_no_context_and_an_oversized_carrier_keeps_its_traceparent(
    db_dsn: str, sql_conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    from opentelemetry import baggage, context

    # Outside any span the SDK starts a trace at the PRODUCER span: its context is stored.
    job = leasectl.enqueue(sql_conn, queue=Q)
    send = one(spans.get_finished_spans(), f"send {Q}")
    assert send.parent is None
    assert json.loads(stored(sql_conn, job.id) or "")["traceparent"].split("-")[2] == (
        f"{send.context.span_id:016x}"
    )
    # A tracestate that takes the carrier past the column's bound: the traceparent alone.
    state = trace.TraceState([(f"v{n}", "x" * 200) for n in range(5)])
    parent = trace.NonRecordingSpan(
        trace.SpanContext(int(VALID.split("-")[1], 16), 1, True, trace.TraceFlags(1), state)
    )
    token = context.attach(baggage.set_baggage("k", "v", trace.set_span_in_context(parent)))
    try:
        big = leasectl.enqueue(sql_conn, queue=Q)
    finally:
        context.detach(token)
    carried = json.loads(stored(sql_conn, big.id) or "")
    assert list(carried) == ["traceparent"]
    assert carried["traceparent"].split("-")[1] == VALID.split("-")[1]
