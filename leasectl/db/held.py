"""A guarded action that skips the jobs another session holds, instead of waiting for them.

Each statement runs under a lock timeout (``Database.rows_waiting_at_most``). A batch that meets
a held row fails whole (nothing changed) and is split in halves until each held job is alone;
that job is skipped as held. A lock that blocks the whole table would split a batch down to
every single job, so the retries stop after ``RETRY_BUDGET_S``: what is left is skipped as held.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from leasectl.core.errors import LockBusy
from leasectl.core.models import SeenState
from leasectl.db.connection import Database

RETRY_BUDGET_S = 2.0


def apply_skipping_held(
    db: Database,
    query: str,
    seen: Sequence[SeenState],
    params: Callable[[Sequence[SeenState]], dict[str, Any]],
) -> tuple[list[int], set[int]]:
    """Run the guarded ``query`` on ``seen`` (``params`` makes a batch's parameters): the ids it
    changed, and the ids skipped because another session held them."""
    changed: list[int] = []
    held: set[int] = set()
    todo: list[Sequence[SeenState]] = [seen] if seen else []
    deadline: float | None = None  # set by the first lock timeout
    while todo:
        batch = todo.pop()
        if deadline is not None and time.monotonic() > deadline:
            held.update(s.id for s in batch)
            continue
        try:
            rows = db.rows_waiting_at_most(query, params(batch))
        except LockBusy:
            deadline = deadline or time.monotonic() + RETRY_BUDGET_S
            if len(batch) == 1:
                held.add(batch[0].id)
            else:
                middle = len(batch) // 2
                todo += [batch[middle:], batch[:middle]]  # the first half next
            continue
        changed += [r["id"] for r in rows]
    return changed, held
