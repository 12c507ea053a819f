"""The trace context's column (migration 28) and the roles: a producer stores the enqueuing
span's context, a worker reads it with its claim; roles granted before the column existed do
both after the upgrade, without `leasectl grant` again."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import leasectl
from tests.integration.test_privileges import (
    ADDED_AFTER_27,
    KINDS,
    Roles,
    grant_without,
    granted,  # noqa: F401 (a fixture)
    init_to,
    login_roles,
    roles,  # noqa: F401 (a fixture)
)
from tests.stores import Stores
from tests.tracing import collecting, one

pytestmark = pytest.mark.full
tracer = trace.get_tracer("tests")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from collecting()


def enqueue_and_claim(made: Roles, spans: InMemorySpanExporter) -> None:
    """As the producer, enqueue in a span; as the worker, claim the job with its context."""
    with psycopg.connect(made.dsn("producer"), autocommit=True) as conn:
        with tracer.start_as_current_span("request"):
            leasectl.enqueue(conn, queue="q", payload={})
    send = one(spans.get_finished_spans(), "send q")
    with Stores.connect(made.dsn("worker"), "leasectl") as store:
        [lease] = store.work.claim("q", "w", timedelta(seconds=30), 1)
    assert lease.trace_context is not None
    assert f"{send.context.span_id:016x}" in lease.trace_context


def test_a_producer_stores_the_context_and_a_worker_reads_it(
    granted: Roles,  # noqa: F811
    spans: InMemorySpanExporter,
) -> None:
    enqueue_and_claim(granted, spans)
    # Nobody but the enqueue writes it: a worker may not.
    with psycopg.connect(granted.dsn("worker"), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE leasectl.jobs SET trace_context = NULL")
    with psycopg.connect(granted.dsn("viewer"), autocommit=True) as conn:
        assert conn.execute("SELECT trace_context FROM leasectl.jobs").fetchall()


def test_roles_granted_at_version_27_enqueue_with_a_trace_context_after_the_upgrade(
    server_dsn: str,
    empty_db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    spans: InMemorySpanExporter,
) -> None:
    tag = secrets.token_hex(4)
    names = {kind: f"lc_v27_{kind}_{tag}" for kind in KINDS}
    with login_roles(server_dsn, empty_db_dsn, names) as made:
        every = init_to(empty_db_dsn, 27, monkeypatch)
        with psycopg.connect(empty_db_dsn, autocommit=True) as conn, conn.transaction():
            for kind, name in names.items():
                # `leasectl grant` as version 27 ran it.
                grant_without(conn, kind, name, ADDED_AFTER_27)
        with Stores.connect(empty_db_dsn, "leasectl", check_schema=False) as store:
            assert store.db.migrate() == [m.version for m in every][27:]
        enqueue_and_claim(made, spans)
