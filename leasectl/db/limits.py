"""Flow control's operations: set, clear and ramp a queue's limits (audited functions of
migration 17, announced to the workers), and read the limits with their current use.

``Operations`` has these methods (``LimitOperations`` is one of its bases): the claims enforce
the limits in PostgreSQL (``jobs.sql``), so nothing here is on a worker's hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from leasectl.core.config import check_queue_length
from leasectl.core.limits import LimitSpec, QueueLimit, Ramped, check_ramp, check_spec
from leasectl.db.connection import Database
from leasectl.db.rows import limit_from_row


class LimitOperations:
    db: Database

    def set_limit(self, queue: str, spec: LimitSpec, *, actor: str, reason: str) -> QueueLimit:
        """Set ``queue``'s limits (audited as 'limit', before and after; its workers are told).
        The new limits replace the old ones whole; a ramp in progress ends."""
        check_queue_length(queue)
        check_spec(spec)
        params = {
            "queue": queue,
            "concurrency": spec.concurrency,
            "rate": spec.rate,
            "burst": spec.burst,
            "actor": actor,
            "reason": reason,
            "channel": self.db.channel,
        }
        rows = self.db.rows_waiting_at_most("queue_limit_set", params)
        return limit_from_row(rows[0])

    def clear_limit(self, queue: str, *, actor: str, reason: str) -> QueueLimit | None:
        """Lift ``queue``'s limits (audited as 'unlimit'; its workers are told): the limits it
        ended, or None when the queue had none (nothing changed)."""
        check_queue_length(queue)
        params = {"queue": queue, "actor": actor, "reason": reason, "channel": self.db.channel}
        rows = self.db.rows_waiting_at_most("queue_limit_clear", params)
        return limit_from_row(rows[0]) if rows else None

    def ramp(
        self, queue: str, ramp: timedelta, *, actor: str, reason: str | None = None
    ) -> Ramped | None:
        """Ramp ``queue``'s limits up from their floor over ``ramp`` and end its pause if it is
        paused, in one transaction (audited; its workers are told). None when the queue has no
        limits (nothing changed, the pause stands)."""
        check_queue_length(queue)
        check_ramp(ramp)
        params = {
            "queue": queue,
            "ramp": ramp,
            "actor": actor,
            "reason": reason,
            "channel": self.db.channel,
        }
        rows = self.db.rows_waiting_at_most("queue_ramp", params)
        if not rows:
            return None
        return Ramped(limit_from_row(rows[0]), bool(rows[0]["resumed"]))

    def limits(self, queues: Sequence[str] | None = None) -> list[QueueLimit]:
        """The limited queues (all, or those of ``queues``), by name, with their current use."""
        rows = self.db.rows("queue_limits_list", {"queues": list(queues) if queues else None})
        return [limit_from_row(r) for r in rows]
