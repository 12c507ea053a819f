"""A fresh leasectl schema in a test database: made with every migration, dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasectl.core.models import Job
    from leasectl.testing.draining import Drained


@dataclass(frozen=True)
class LeasectlSchema:
    """A migrated schema of its own in the test database: ``dsn`` and ``schema`` to give the
    code under test (``leasectl.enqueue(conn, ..., schema=s.schema)``), and the testing helpers
    bound to them."""

    dsn: str
    schema: str

    def drain(self, queue: str, handler: Callable[..., Any], **options: Any) -> Drained:
        from leasectl.testing.draining import drain

        return drain(self.dsn, queue, handler, schema=self.schema, **options)

    def assert_enqueued(
        self, conn: Any, queue: str, payload_contains: Any = None, **options: Any
    ) -> list[Job]:
        from leasectl.testing.asserts import assert_enqueued

        return assert_enqueued(conn, queue, payload_contains, schema=self.schema, **options)

    def assert_not_enqueued(self, conn: Any, queue: str, payload_contains: Any = None) -> None:
        from leasectl.testing.asserts import assert_not_enqueued

        assert_not_enqueued(conn, queue, payload_contains, schema=self.schema)


@contextmanager
def fresh_schema(dsn: str, prefix: str = "leasectl_test") -> Iterator[LeasectlSchema]:
    """A new schema ``<prefix>_<random>`` with every migration applied (``leasectl init``'s),
    dropped with everything in it when the block ends."""
    from leasectl.db.testing import drop_schema, migrate_schema

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    migrate_schema(dsn, name)
    try:
        yield LeasectlSchema(dsn, name)
    finally:
        drop_schema(dsn, name)
