"""The data layer's callers over one Database, for tests that act as several of them at once
(a producer, a worker, an operator, the watcher, the console), each built as its caller does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leasectl.console.panels import Panels
from leasectl.db.connection import Database
from leasectl.db.console import ConsoleReads
from leasectl.db.operations import Operations
from leasectl.db.work import WorkerStore


@dataclass
class Stores:
    db: Database
    work: WorkerStore  # the worker's hot path
    ops: Operations  # producers, operators, the watcher, the CLI
    panels: Panels  # the console's snapshots

    @classmethod
    def over(cls, db: Database) -> Stores:
        return cls(db, WorkerStore(db), Operations(db), Panels(ConsoleReads(db)))

    @classmethod
    def connect(cls, dsn: str, schema: str, **kwargs: Any) -> Stores:
        """``Database.connect(dsn, schema, **kwargs)``, and its callers."""
        return cls.over(Database.connect(dsn, schema, **kwargs))

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Stores:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
