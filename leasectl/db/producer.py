"""Enqueue on the application's own connection, inside the transaction it has open: the jobs
exist only if that transaction commits, and the workers' wake-up (NOTIFY) is sent only then
(PostgreSQL delivers a transaction's notifications at its commit). Nothing here commits, rolls
back, opens a transaction or changes the connection's settings; a bad value raises a
``UsageError`` before any SQL, so the caller's transaction stays usable. Database errors are
psycopg's own, as for any statement of the caller's (a serialization failure is the caller's to
retry with its transaction).

One statement (``jobs_enqueue``) for any number of jobs, or a second one for the unique keys
the first could not settle: a key whose live job another transaction committed while this one
waited on it is not visible to the statement that waited, and a new statement sees it.

On a connection in autocommit (and no transaction open) the call is its own transaction: one
statement, committed by autocommit, the jobs visible and the workers woken when it returns. The
one exception to "opens no transaction": when unique keys may need that second statement, the
two run in one transaction (``conn.transaction()``: BEGIN, COMMIT), so that ``enqueue_many``
stays all or nothing in autocommit too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow, tuple_row
from psycopg.types.json import Jsonb

from leasectl.core.config import DEFAULT_SCHEMA
from leasectl.core.enqueue import (
    CheckedJob,
    Enqueued,
    NewJob,
    check_job,
    check_schema_name,
)
from leasectl.core.errors import LeasectlError
from leasectl.core.tracing import sending
from leasectl.db import sql as queries
from leasectl.db.connection import channel_for

# A key unsettled this many statements in a row (its live job committed, then finished, between
# each statement and the next, every time) is an error rather than a loop.
MAX_ROUNDS = 20


def _as_is(text: str) -> str:
    """The "dumps" of a payload already written as JSON text: the text itself."""
    return text


class Enqueue:
    """One enqueue of checked jobs: the parameters of each statement, and the results.

    A key given twice in one call (same queue) is one job: the later ones are duplicates of
    the first (which may itself be a duplicate of a live job)."""

    def __init__(self, jobs: Sequence[CheckedJob], schema: str) -> None:
        self.jobs = jobs
        self.channel = channel_for(schema)
        self.schema = schema
        self.results: list[Enqueued | None] = [None] * len(jobs)
        self.first_of: dict[int, int] = {}  # a later job with a key -> the first with it
        self.keyed = any(j.unique_key is not None for j in _runs(jobs))
        self.todo: list[int] = []
        if not self.keyed:
            self.todo = list(range(len(jobs)))
        else:
            seen: dict[tuple[str, str], int] = {}
            for i, job in enumerate(jobs):
                if job.unique_key is not None:
                    first = seen.setdefault((job.queue, job.unique_key), i)
                    if first != i:
                        self.first_of[i] = first
                        continue
                self.todo.append(i)
        self.rounds = 0
        # The enqueuing span's context, stored with every job of the call (core/tracing.py).
        self.trace_context: str | None = None

    def queues(self) -> list[str]:
        """The queues the jobs go to, each once (an enqueue's span names them)."""
        return sorted({j.queue for j in _runs(self.jobs)})

    def params(self) -> dict[str, Any] | None:
        """The next statement's parameters, or None when every job has its result."""
        if not self.todo:
            return None
        self.rounds += 1
        if self.rounds > MAX_ROUNDS:
            raise LeasectlError(
                f"enqueue: {len(self.todo)} unique key(s) still unsettled after {MAX_ROUNDS} "
                "statements (their live jobs kept finishing meanwhile); try again"
            )
        jobs = (
            self.jobs if self.rounds == 1 and not self.keyed else [self.jobs[i] for i in self.todo]
        )
        # (Copies of one job, as `enqueue --count` sends, are one object: looked at once.)
        distinct = list(_runs(jobs))
        params: dict[str, Any] = {
            "payloads": [Jsonb(j.payload, dumps=_as_is) for j in jobs],
            "channel": self.channel,
            "notify": sorted({j.queue for j in distinct}),
            "trace_context": self.trace_context,
        }
        first = jobs[0]
        others = distinct[1:]
        for name in (
            "queue",
            "priority",
            "delay",
            "max_attempts",
            "unique_key",
            "concurrency_key",
            "timeout",
        ):
            value = getattr(first, name)
            if all(getattr(j, name) == value for j in others):
                params[name], params[f"{name}_each"] = value, None
            else:
                params[name], params[f"{name}_each"] = None, [getattr(j, name) for j in jobs]
        # Every concurrency key's lock, in one order for all (migration 18: jobs_key_lock).
        locks = sorted({(j.queue, j.concurrency_key) for j in distinct if j.concurrency_key})
        params["lock_class"] = self.schema
        params["lock_queues"] = [q for q, _ in locks]
        params["lock_keys"] = [k for _, k in locks]
        keyed = [j for j in jobs if j.unique_key is not None] if self.keyed else []
        params["keyed_queues"] = [j.queue for j in keyed]
        params["keyed_keys"] = [j.unique_key for j in keyed]
        return params

    def take(self, rows: Sequence[TupleRow]) -> None:
        """The rows of a statement (id, queue, unique_key, duplicate), ordered by id."""
        if not self.keyed and len(rows) == len(self.todo):
            # No key: every job was inserted, in order (the fast path of many jobs).
            for i, row in zip(self.todo, rows, strict=True):
                self.results[i] = Enqueued(row[0], False)
            self.todo = []
            return
        by_key: dict[tuple[str, str], Enqueued] = {}
        plain: list[int] = []
        for job_id, queue, key, duplicate in rows:
            if key is None:
                plain.append(job_id)
            else:
                by_key[(queue, key)] = Enqueued(job_id, duplicate)
        jobs = self.jobs
        unkeyed = [i for i in self.todo if jobs[i].unique_key is None]
        if len(plain) != len(unkeyed):
            raise LeasectlError(f"enqueue: {len(unkeyed)} job(s) sent, {len(plain)} inserted")
        # Ids are given in the order of the INSERT's ORDER BY n: the n-th job without a key
        # has the n-th smallest of their ids.
        for i, job_id in zip(unkeyed, plain, strict=True):
            self.results[i] = Enqueued(job_id, False)
        again = []
        for i in self.todo:
            job = self.jobs[i]
            if job.unique_key is None:
                continue
            found = by_key.get((job.queue, job.unique_key))
            if found is None:
                again.append(i)
            else:
                self.results[i] = found
        self.todo = again

    def done(self) -> list[Enqueued]:
        results = self.results
        for i, first in self.first_of.items():
            found = results[first]
            assert found is not None
            results[i] = Enqueued(found.id, True)
        out = [r for r in results if r is not None]
        assert len(out) == len(results)
        return out


def _runs(jobs: Sequence[CheckedJob]) -> Iterable[CheckedJob]:
    """``jobs`` without repeats of the same object in a row (the copies of `enqueue --count`)."""
    last = None
    for job in jobs:
        if job is not last:
            yield job
            last = job


def _prepare(jobs: Iterable[NewJob], schema: str) -> tuple[Enqueue, Any]:
    checked = [check_job(j) for j in jobs]
    schema = check_schema_name(schema)
    return Enqueue(checked, schema), queries.get("jobs_enqueue").render(schema)


def _one(
    payload: Any,
    queue: str,
    priority: int,
    delay: timedelta,
    max_attempts: int,
    unique_key: str | None,
    concurrency_key: str | None = None,
    timeout: timedelta | None = None,
) -> NewJob:
    return NewJob(
        payload=payload,
        queue=queue,
        priority=priority,
        delay=delay,
        max_attempts=max_attempts,
        unique_key=unique_key,
        concurrency_key=concurrency_key,
        timeout=timeout,
    )


def _sync(conn: Any, what: str) -> psycopg.Connection[Any]:
    if not isinstance(conn, psycopg.Connection):
        hint = " (use its _async form)" if isinstance(conn, psycopg.AsyncConnection) else ""
        raise TypeError(f"{what} takes a psycopg.Connection, got {type(conn).__name__}{hint}")
    return conn


def _async(conn: Any, what: str) -> psycopg.AsyncConnection[Any]:
    if not isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(f"{what} takes a psycopg.AsyncConnection, got {type(conn).__name__}")
    return conn


def _own_transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], plan: Enqueue
) -> bool:
    """Autocommit, no transaction open, and unique keys (which may take two statements): the
    statements must commit together."""
    return (
        plan.keyed and conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE
    )


def run_enqueue(conn: psycopg.Connection[Any], plan: Enqueue, statement: Any) -> list[Enqueued]:
    """Run a checked enqueue on ``conn``, in whatever transaction it has open (in autocommit:
    its own)."""
    with sending(plan.queues, len(plan.jobs)) as span:
        plan.trace_context = span.carrier
        own = conn.transaction() if _own_transaction(conn, plan) else contextlib.nullcontext()
        # A cursor of its own: the connection's row factory and cursor class are the caller's.
        with own, psycopg.Cursor(conn, row_factory=tuple_row) as cur:
            while (params := plan.params()) is not None:
                cur.execute(statement, params)
                plan.take(cur.fetchall())
        results = plan.done()
        span.sent(results)
    return results


def enqueue(
    conn: psycopg.Connection[Any],
    *,
    queue: str,
    payload: Any = None,
    priority: int = 0,
    delay: timedelta = timedelta(0),
    max_attempts: int = 5,
    unique_key: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    concurrency_key: str | None = None,
    timeout: timedelta | None = None,
) -> Enqueued:
    """Enqueue one job on ``conn``, inside the transaction it has open (the job exists once that
    commits; in autocommit, when this returns). See ``NewJob`` for the values."""
    conn = _sync(conn, "leasectl.enqueue")
    job = _one(payload, queue, priority, delay, max_attempts, unique_key, concurrency_key, timeout)
    plan, statement = _prepare([job], schema)
    return run_enqueue(conn, plan, statement)[0]


def enqueue_many(
    conn: psycopg.Connection[Any], jobs: Iterable[NewJob], *, schema: str = DEFAULT_SCHEMA
) -> list[Enqueued]:
    """Enqueue ``jobs`` on ``conn`` in one statement, inside the transaction it has open (in
    autocommit, a transaction of their own: all or none); a result per job, in their order."""
    conn = _sync(conn, "leasectl.enqueue_many")
    plan, statement = _prepare(jobs, schema)
    return run_enqueue(conn, plan, statement)


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any],
    *,
    queue: str,
    payload: Any = None,
    priority: int = 0,
    delay: timedelta = timedelta(0),
    max_attempts: int = 5,
    unique_key: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    concurrency_key: str | None = None,
    timeout: timedelta | None = None,
) -> Enqueued:
    """``enqueue`` on an ``AsyncConnection``."""
    aconn = _async(conn, "leasectl.enqueue_async")
    job = _one(payload, queue, priority, delay, max_attempts, unique_key, concurrency_key, timeout)
    plan, statement = _prepare([job], schema)
    return (await _run_async(aconn, plan, statement))[0]


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], jobs: Iterable[NewJob], *, schema: str = DEFAULT_SCHEMA
) -> list[Enqueued]:
    """``enqueue_many`` on an ``AsyncConnection``."""
    aconn = _async(conn, "leasectl.enqueue_many_async")
    plan, statement = _prepare(jobs, schema)
    return await _run_async(aconn, plan, statement)


async def _run_async(
    conn: psycopg.AsyncConnection[Any], plan: Enqueue, statement: Any
) -> list[Enqueued]:
    with sending(plan.queues, len(plan.jobs)) as span:
        plan.trace_context = span.carrier
        own = conn.transaction() if _own_transaction(conn, plan) else contextlib.nullcontext()
        async with own, psycopg.AsyncCursor(conn, row_factory=tuple_row) as cur:
            while (params := plan.params()) is not None:
                await cur.execute(statement, params)
                plan.take(await cur.fetchall())
        results = plan.done()
        span.sent(results)
    return results
