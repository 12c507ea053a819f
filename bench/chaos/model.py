"""The soak's settings, its tally of chaos, and the report of its invariants."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.failover import ASYNC_MAY_BREAK

ROOT = Path(__file__).resolve().parents[2]  # the repository
QUEUE = "chaos"
WATCHER = "watcher@chaos"
OPERATOR = "operator:chaos"
MAX_ATTEMPTS = 1000  # attempts are burned by kills and takeovers; the budget is not under test

log = logging.getLogger("chaos")


@dataclass(frozen=True)
class Settings:
    workers: int = 6
    jobs: int = 20_000
    duration: float = 600.0
    dsn: str | None = None
    seed: int = 0
    concurrency: int = 4
    lease_ttl: float = 2.0
    heartbeat: float = 0.5
    watch_interval: float = 0.5
    mean_job_ms: float = 20.0
    long_fraction: float = 0.02  # jobs that outlive their first lease: heartbeats must carry them
    stubborn_fraction: float = 0.05  # handlers that ignore ctx.cancelled: only fencing stops them
    fail_fraction: float = 0.01  # handlers that raise on their first attempt
    # Jobs whose handler writes a business row and completes in one transaction
    # (ctx.transaction()); the others complete on the worker's round trip.
    transaction_fraction: float = 0.5
    action_gap: float | None = None  # mean seconds between chaos actions (default: from duration)
    drain_timeout: float = 300.0
    keep: bool = False
    failover: str | None = None  # "sync" or "async": a replicated pair, failed over
    failovers: int = 2
    lag: float = 0.5  # seconds the standby falls behind before each failover's kill
    async_handlers: bool = False  # the workers run handle_async (tasks of an event loop)

    @property
    def gap(self) -> float:
        if self.action_gap is not None:
            return self.action_gap
        return min(5.0, max(1.0, self.duration / 120))


@dataclass
class Tally:
    kills: int = 0
    terms: int = 0
    stops: int = 0
    longest_stop_s: float = 0.0
    worker_starts: int = 0
    restarts: Counter[str] = field(default_factory=Counter)
    longest_outage_s: float = 0.0
    operator_calls: int = 0
    operator_changed: int = 0
    operator_unknown: int = 0  # calls whose outcome is unknown (connection lost)
    operator_max_ids: int = 0
    watcher_failed_passes: int = 0
    actions: Counter[str] = field(default_factory=Counter)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    sample: list[Any] = field(default_factory=list)


@dataclass
class Report:
    settings: dict[str, Any]
    tally: dict[str, Any]
    counts: dict[str, Any]
    checks: list[Check]
    elapsed_s: float

    @property
    def violations(self) -> list[Check]:
        """The checks that failed and had to hold: under asynchronous replication, those a
        failover may break (``ASYNC_MAY_BREAK``) are reported, not counted."""
        tolerated = ASYNC_MAY_BREAK if self.settings.get("failover") == "async" else frozenset()
        return [c for c in self.checks if not c.ok and c.name not in tolerated]

    @property
    def broken_by_async(self) -> list[Check]:
        if self.settings.get("failover") != "async":
            return []
        return [c for c in self.checks if not c.ok and c.name in ASYNC_MAY_BREAK]

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "tally": self.tally,
            "counts": self.counts,
            "checks": [asdict(c) for c in self.checks],
            "violations": len(self.violations),
            "broken_by_async_failover": [c.name for c in self.broken_by_async],
            "elapsed_s": self.elapsed_s,
        }
