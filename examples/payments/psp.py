"""A simulated payment service provider (PSP): an external system, slow, idempotent by key.

Its ledger is the ``psp_charges`` table, written on a connection of its own that commits at
once: like a real PSP's, a charge it made stays made whatever happens to the caller's
transaction. Charging twice with one idempotency key returns the first charge (as Stripe's or
Adyen's idempotency keys do), so a capture that runs again after a crash charges once.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

LEDGER = """
CREATE TABLE IF NOT EXISTS psp_charges (
    idempotency_key text PRIMARY KEY,
    charge_id       text NOT NULL,
    amount_cents    bigint NOT NULL,
    calls           integer NOT NULL DEFAULT 1,
    charged_at      timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def charge(dsn: str, idempotency_key: str, amount_cents: int, latency: float) -> str:
    """Charge once per key and return the charge id. The charge is made at once; the answer
    takes ``latency`` seconds to come back (a caller that dies meanwhile has charged the
    customer without knowing it: its retry must not charge again)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row: Any = conn.execute(
            "INSERT INTO psp_charges (idempotency_key, charge_id, amount_cents) "
            "VALUES (%s, 'ch_' || md5(%s), %s) "
            "ON CONFLICT (idempotency_key) DO UPDATE SET calls = psp_charges.calls + 1 "
            "RETURNING charge_id",
            (idempotency_key, idempotency_key, amount_cents),
        ).fetchone()
    time.sleep(latency)  # the answer's way back: simulated latency, not synchronisation
    return str(row[0])


def lookup(conn: psycopg.Connection[Any], idempotency_key: str) -> str | None:
    """The charge made under this key, if any (the PSP's "retrieve by idempotency key")."""
    row = conn.execute(
        "SELECT charge_id FROM psp_charges WHERE idempotency_key = %s", (idempotency_key,)
    ).fetchone()
    return None if row is None else str(row[0])
