"""The payment example's own tests, written as an application's would be: the
``leasectl_schema`` fixture of leasectl's pytest plugin gives each test a fresh leasectl schema
in the test database (``--leasectl-dsn`` or ``$LEASECTL_TEST_DSN``; ``$LEASECTL_DSN`` names it
while the test runs, as the handlers expect), and the application's tables are made next to it.

    .venv/bin/python -m pytest examples/payments/tests --leasectl-dsn "dbname=payments_test"
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from examples.payments import psp
from examples.payments.__main__ import APP_SCHEMA
from leasectl.testing import LeasectlSchema


@pytest.fixture
def app(leasectl_schema: LeasectlSchema) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the test database with the application's tables, empty."""
    with psycopg.connect(leasectl_schema.dsn, autocommit=True) as conn:
        conn.execute(APP_SCHEMA)
        conn.execute(psp.LEDGER)
        conn.execute("TRUNCATE payments, psp_charges")
        yield conn
