"""``assert_enqueued`` / ``assert_not_enqueued``: what a test asks of the jobs its code enqueued,
read on the test's own connection (inside its transaction, if one is open), with a failure
message that shows what the queue does hold."""

from __future__ import annotations

import json
from typing import Any

from leasectl.core.config import DEFAULT_SCHEMA
from leasectl.core.literal import echo, shorten, visible
from leasectl.core.models import Job

SHOWN_JOBS = 10  # jobs a failure message lists
PAYLOAD_CHARS = 200  # of each payload it shows


def _jobs(conn: Any, schema: str, queue: str, payload: Any, limit: int) -> list[Job]:
    from leasectl.db.testing import jobs_of_queue

    return jobs_of_queue(conn, schema, queue, payload, limit)


def _shown(value: Any) -> str:
    """A payload as compact JSON, cut short, every control character escaped (untrusted)."""
    return visible(shorten(json.dumps(value, ensure_ascii=False, default=str), PAYLOAD_CHARS))


def _listing(jobs: list[Job], more: bool) -> str:
    lines = [f"  job {j.id} {j.status.value}: {_shown(j.payload)}" for j in jobs[:SHOWN_JOBS]]
    if more or len(jobs) > SHOWN_JOBS:
        lines.append("  …")
    return "\n".join(lines)


def _what(queue: str, payload_contains: Any) -> str:
    where = f"in queue {echo(queue)}"
    if payload_contains is None:
        return where
    return f"{where} whose payload contains {_shown(payload_contains)}"


def assert_enqueued(
    conn: Any,
    queue: str = "default",
    payload_contains: Any = None,
    *,
    schema: str = DEFAULT_SCHEMA,
    count: int | None = None,
) -> list[Job]:
    """Assert that ``queue`` holds a job (any status; ``count``: exactly that many) whose payload
    contains ``payload_contains`` (JSON containment, as PostgreSQL's ``@>``: a dict matches a
    payload with those keys and values, among others). Returns the matching jobs, oldest first.

    ``conn``: a psycopg ``Connection``; jobs enqueued in its open transaction count."""
    limit = max(count or 0, SHOWN_JOBS) + 1
    found = _jobs(conn, schema, queue, payload_contains, limit)
    if count is None and found:
        return found
    if count is not None and len(found) == count:
        return found
    wanted = "a job" if count is None else f"{count} job{'s' if count != 1 else ''}"
    got = f"found {len(found) if len(found) < limit else f'more than {limit - 1}'}"
    message = f"expected {wanted} {_what(queue, payload_contains)}; {got}"
    if found:
        message += ":\n" + _listing(found, len(found) >= limit)
    elif payload_contains is not None:
        others = _jobs(conn, schema, queue, None, SHOWN_JOBS + 1)
        if others:
            message += f"; the queue holds:\n{_listing(others, len(others) > SHOWN_JOBS)}"
        else:
            message += "; the queue holds no job"
    raise AssertionError(message)


def assert_not_enqueued(
    conn: Any,
    queue: str = "default",
    payload_contains: Any = None,
    *,
    schema: str = DEFAULT_SCHEMA,
) -> None:
    """Assert that ``queue`` holds no job (any status) whose payload contains
    ``payload_contains`` (None: no job at all)."""
    found = _jobs(conn, schema, queue, payload_contains, SHOWN_JOBS + 1)
    if found:
        raise AssertionError(
            f"expected no job {_what(queue, payload_contains)}; found:\n"
            + _listing(found, len(found) > SHOWN_JOBS)
        )
