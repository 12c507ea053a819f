"""Concurrency keys' operations: the stuck watcher's healing pass (migration 18), which promotes
the first Waiting job of a key left without a head. ``Operations`` has this method
(``KeyOperations`` is one of its bases)."""

from __future__ import annotations

from leasectl.db.connection import Database


class KeyOperations:
    db: Database

    def heal_keys(
        self, *, max_keys: int, after: tuple[str, str] | None
    ) -> tuple[list[int], tuple[str, str] | None]:
        """A step of the watcher's healing pass (migration 18): the jobs it promoted and the
        key to go on after (None: the walk reached the end)."""
        queue, key = after or (None, None)
        params = {"max_keys": max_keys, "after_queue": queue, "after_key": key}
        rows = self.db.rows("jobs_keys_heal", params)
        promoted = [r["promoted"] for r in rows if r["promoted"] is not None]
        last = rows[-1] if rows else None
        cursor = (last["queue"], last["concurrency_key"]) if last and last["queue"] else None
        return promoted, cursor
