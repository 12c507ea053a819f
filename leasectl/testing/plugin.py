"""The pytest plugin of ``leasectl.testing`` (entry point ``pytest11``: loaded by every pytest
run where leasectl is installed). It adds one option and one fixture and imports nothing else
until a test asks for the fixture.

``leasectl_schema``: a fresh schema of its own per test, migrated, in the database that
``--leasectl-dsn`` (or the ini option ``leasectl_dsn``, or ``$LEASECTL_TEST_DSN``) names; dropped
after the test. While the test runs, ``$LEASECTL_DSN`` and ``$LEASECTL_SCHEMA`` name it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from leasectl.testing.schema import LeasectlSchema

DSN_ENV = "LEASECTL_TEST_DSN"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasectl", "leasectl.testing")
    group.addoption(
        "--leasectl-dsn",
        default=None,
        help=f"the test database of the leasectl_schema fixture (else ${DSN_ENV})",
    )
    parser.addini("leasectl_dsn", "the test database of the leasectl_schema fixture", default="")


def _dsn(config: pytest.Config) -> str:
    given = config.getoption("--leasectl-dsn") or config.getini("leasectl_dsn")
    dsn = str(given or os.environ.get(DSN_ENV, ""))
    if not dsn:
        pytest.fail(
            f"leasectl_schema needs a test database: --leasectl-dsn, the ini option "
            f"leasectl_dsn or ${DSN_ENV}",
            pytrace=False,
        )
    return dsn


@pytest.fixture
def leasectl_schema(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LeasectlSchema]:
    """A fresh leasectl schema (every migration applied) for this test, dropped after it."""
    from leasectl.testing.schema import fresh_schema

    with fresh_schema(_dsn(request.config)) as made:
        monkeypatch.setenv("LEASECTL_DSN", made.dsn)
        monkeypatch.setenv("LEASECTL_SCHEMA", made.schema)
        yield made
