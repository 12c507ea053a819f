"""The payment example's handlers, run by ``leasectl worker --handler
examples.payments.handlers:capture`` (and ``:reconcile``). The DSN of the application's
database is ``LEASECTL_DSN``, as the worker's."""

from __future__ import annotations

import logging
import os

from examples.payments import psp
from leasectl import JobContext

log = logging.getLogger("payments")


def capture_key(payment_id: int) -> str:
    return f"capture-{payment_id}"


def capture(ctx: JobContext) -> None:
    """Capture one payment: charge the PSP (slow: the worker's heartbeats keep the lease
    meanwhile), then record the capture and complete the job in ONE transaction.

    The PSP call stays outside the database transaction: a worker stopped mid-call must not hold
    a row lock that the job's next owner would wait on. If this worker dies after the charge and
    before the commit, the lease lapses, another worker runs the job again and the PSP returns
    the same charge (same idempotency key): the customer is charged once, the payment recorded
    once. If the lease was lost meanwhile (taken over, cancelled by an operator), leaving the
    block raises ``LeaseLost`` and rolls the recording back: the job's new owner records it."""
    payment_id = int(ctx.payload["payment_id"])
    latency = float(ctx.payload.get("psp_latency", 1.0))
    charge_id = psp.charge(
        os.environ["LEASECTL_DSN"],
        capture_key(payment_id),
        int(ctx.payload["amount_cents"]),
        latency,
    )
    if ctx.is_cancelled():
        return  # the lease is gone: the result would not be written; the new owner records it
    with ctx.transaction() as conn:
        conn.execute(
            "UPDATE payments SET status = 'captured', charge_id = %s, captured_at = now() "
            "WHERE id = %s AND status = 'pending'",
            (charge_id, payment_id),
        )
    # Leaving the block completed the job in the transaction that recorded the capture.


def reconcile(ctx: JobContext) -> None:
    """Record the captures the PSP made that the application did not record (a capture job that
    ran out of attempts after the charge, or was cancelled): one transaction, with the
    completion of this job."""
    with ctx.transaction() as conn:
        left = conn.execute(
            "SELECT id FROM payments WHERE status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED"
        ).fetchall()
        for (payment_id,) in left:
            charge_id = psp.lookup(conn, capture_key(payment_id))
            if charge_id is not None:
                conn.execute(
                    "UPDATE payments SET status = 'captured', charge_id = %s, "
                    "captured_at = now(), reconciled = true WHERE id = %s",
                    (charge_id, payment_id),
                )
                log.info("reconciled payment %s (charge %s)", payment_id, charge_id)
