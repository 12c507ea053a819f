"""The payment example's handlers, tested with ``leasectl.testing``: jobs enqueued in the
transaction that creates the payment (``assert_enqueued``), then run in-process through the
worker's own claim, fence and completion (``drain``), and the outcome checked in the tables."""

from __future__ import annotations

from typing import Any

import psycopg

import leasectl
from examples.payments import psp
from examples.payments.handlers import capture, capture_key, reconcile
from leasectl.testing import LeasectlSchema, Outcome


def checkout(conn: psycopg.Connection[Any], schema: str, amount: int) -> int:
    """What the application does at checkout: the payment and its capture job, one transaction."""
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO payments (amount_cents) VALUES (%s) RETURNING id", (amount,)
        ).fetchone()
        assert row is not None
        payment_id: int = row[0]
        leasectl.enqueue(
            conn,
            queue="payments",
            payload={"payment_id": payment_id, "amount_cents": amount, "psp_latency": 0},
            unique_key=capture_key(payment_id),
            schema=schema,
        )
    return payment_id


def test_checkout_enqueues_one_capture_and_a_double_click_none(
    app: psycopg.Connection[Any], leasectl_schema: LeasectlSchema
) -> None:
    payment = checkout(app, leasectl_schema.schema, 1250)
    with app.transaction():  # the customer clicked twice: a duplicate, not a second job
        again = leasectl.enqueue(
            app,
            queue="payments",
            payload={"payment_id": payment},
            unique_key=capture_key(payment),
            schema=leasectl_schema.schema,
        )
    assert again.duplicate
    leasectl_schema.assert_enqueued(app, "payments", {"payment_id": payment}, count=1)


def test_a_checkout_rolled_back_leaves_no_capture(
    app: psycopg.Connection[Any], leasectl_schema: LeasectlSchema
) -> None:
    with app.transaction(force_rollback=True):
        leasectl.enqueue(
            app, queue="payments", payload={"payment_id": 999}, schema=leasectl_schema.schema
        )
        leasectl_schema.assert_enqueued(app, "payments", {"payment_id": 999})  # (inside it)
    leasectl_schema.assert_not_enqueued(app, "payments")


def test_capture_charges_and_records_the_payment_with_its_jobs_completion(
    app: psycopg.Connection[Any], leasectl_schema: LeasectlSchema
) -> None:
    payments = [checkout(app, leasectl_schema.schema, amount) for amount in (1000, 2000)]

    runs = leasectl_schema.drain("payments", capture)

    assert [run.outcome for run in runs] == [Outcome.COMPLETED, Outcome.COMPLETED]
    rows = app.execute(
        "SELECT p.status, p.charge_id = c.charge_id, c.calls FROM payments p "
        "JOIN psp_charges c ON c.idempotency_key = 'capture-' || p.id ORDER BY p.id"
    ).fetchall()
    assert rows == [("captured", True, 1)] * len(payments)


def test_a_capture_run_again_after_a_crash_charges_once(
    app: psycopg.Connection[Any], leasectl_schema: LeasectlSchema
) -> None:
    payment = checkout(app, leasectl_schema.schema, 1000)
    # The first run charged the PSP and died before it recorded anything.
    first = psp.charge(leasectl_schema.dsn, capture_key(payment), 1000, 0.0)

    runs = leasectl_schema.drain("payments", capture)

    assert [run.outcome for run in runs] == [Outcome.COMPLETED]
    assert app.execute(
        "SELECT p.charge_id, c.calls FROM payments p "
        "JOIN psp_charges c ON c.idempotency_key = 'capture-' || p.id"
    ).fetchall() == [(first, 2)]


def test_reconcile_records_a_capture_the_psp_made(
    app: psycopg.Connection[Any], leasectl_schema: LeasectlSchema
) -> None:
    row = app.execute("INSERT INTO payments (amount_cents) VALUES (777) RETURNING id").fetchone()
    assert row is not None
    charged = psp.charge(leasectl_schema.dsn, capture_key(row[0]), 777, 0.0)
    leasectl.enqueue(app, queue="payments.reconcile", payload={}, schema=leasectl_schema.schema)

    runs = leasectl_schema.drain("payments.reconcile", reconcile)

    assert [run.outcome for run in runs] == [Outcome.COMPLETED]
    assert app.execute("SELECT status, charge_id, reconciled FROM payments").fetchall() == [
        ("captured", charged, True)
    ]
