"""The watcher's default pace: how long a pass waits after each batch, from the batches' times.

A batch is one statement whose work per row is fixed; what varies is how long the server took
to do it. Alone, a batch runs at the server's full speed; beside busy workers it waits for
CPU, for the WAL and for its commit's flush behind theirs, and takes longer per row. The pass
keeps the fastest time per row it has seen (its best estimate of the uncontended cost) and,
after a batch that ran slower than that, waits in proportion to the slowdown: the busier the
server, the larger the share of the pass spent waiting, so the workers get the server back
(the idea of LEDBAT's background transfers, which back off when their delay grows). A batch
within ``DEAD_BAND`` of the best counts as uncontended: on an idle server the pass runs flat
out. The figures behind the constants are in BENCHMARKS.md ("watcher").
"""

from __future__ import annotations

from dataclasses import dataclass

# A batch up to this many times the best time per row counts as uncontended (no wait): batch
# times spread by this much without any worker (commit flushes, checkpoints).
DEAD_BAND = 1.5
# Seconds of wait per second of the batch, per unit of slowdown beyond the dead band.
GAIN = 1.0
# At most this many times the batch's own time, as `--pace 1`: the pass spends at least half
# its time in statements, so it ends even beside a saturated server.
MAX_FACTOR = 1.0


def paced_wait(took: float, rows: int, best: float) -> float:
    """Seconds to wait after a batch of ``rows`` rows that took ``took`` seconds, when the
    fastest batch of the pass took ``best`` seconds per row."""
    if took <= 0 or rows < 1 or best <= 0:
        return 0.0
    slowdown = took / rows / best
    if slowdown <= DEAD_BAND:
        return 0.0
    return took * min(MAX_FACTOR, GAIN * (slowdown - DEAD_BAND))


@dataclass
class AdaptivePace:
    """The default pace of one pass: the fastest time per row so far, and the wait it gives."""

    best: float | None = None  # seconds per row of the fastest batch so far

    def after(self, took: float, rows: int) -> float:
        """Seconds to wait after a batch that moved ``rows`` rows in ``took`` seconds."""
        if took <= 0 or rows < 1:
            return 0.0
        per_row = took / rows
        if self.best is None or per_row < self.best:
            self.best = per_row
        return paced_wait(took, rows, self.best)


@dataclass(frozen=True)
class FixedPace:
    """An explicit ``--pace F``: wait F times each batch's time (0: back to back)."""

    factor: float

    def after(self, took: float, rows: int) -> float:
        return self.factor * took if took > 0 else 0.0
