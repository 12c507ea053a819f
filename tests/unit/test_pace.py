"""The watcher's pace: the adaptive default's rule, and an explicit --pace."""

from __future__ import annotations

import pytest

from leasectl.core.pace import (
    DEAD_BAND,
    GAIN,
    MAX_FACTOR,
    AdaptivePace,
    FixedPace,
    paced_wait,
)


def test_batches_as_fast_as_the_fastest_run_flat_out() -> None:
    pace = AdaptivePace()
    assert [pace.after(0.010, 500) for _ in range(5)] == [0.0] * 5
    # Within the dead band (an idle server's spread) still no wait.
    assert pace.after(0.010 * DEAD_BAND, 500) == 0.0


def test_a_slower_batch_waits_in_proportion_to_its_slowdown() -> None:
    best = 0.010 / 500
    slowdown = 2.0
    took = 0.010 * slowdown
    assert paced_wait(took, 500, best) == pytest.approx(took * GAIN * (slowdown - DEAD_BAND))
    # The slower, the longer the wait, relative to the batch's own time too.
    waits = [paced_wait(0.010 * s, 500, best) / (0.010 * s) for s in (1.75, 2.0, 2.25)]
    assert waits == sorted(waits) and waits[0] > 0


def test_the_wait_is_capped_in_proportion_to_the_batch() -> None:
    best = 0.010 / 500
    assert paced_wait(1.0, 500, best) == pytest.approx(MAX_FACTOR * 1.0)


def test_the_time_per_row_is_compared_not_the_batch_time() -> None:
    best = 0.010 / 500
    # Half the rows in the same time is twice as slow per row.
    assert paced_wait(0.010, 250, best) == paced_wait(0.020, 500, best) / 2
    assert paced_wait(0.005, 250, best) == 0.0


def test_the_best_is_the_fastest_batch_so_far() -> None:
    pace = AdaptivePace()
    # A cold first batch (the pages read from disk) sets no low bar: it is its own best.
    assert pace.after(0.050, 500) == 0.0
    assert pace.after(0.010, 500) == 0.0
    assert pace.best == pytest.approx(0.010 / 500)
    assert pace.after(0.030, 500) == pytest.approx(paced_wait(0.030, 500, 0.010 / 500))
    assert pace.best == pytest.approx(0.010 / 500)


@pytest.mark.parametrize(("took", "rows"), [(0.0, 500), (-1.0, 500), (0.010, 0)])
def test_nothing_measured_waits_nothing(took: float, rows: int) -> None:
    pace = AdaptivePace()
    assert pace.after(took, rows) == 0.0
    assert pace.best is None
    assert paced_wait(took, rows, 0.001) == 0.0
    assert paced_wait(0.010, 500, 0.0) == 0.0


def test_an_explicit_pace_is_a_fixed_multiple_of_each_batch() -> None:
    assert FixedPace(0.0).after(0.5, 500) == 0.0
    assert FixedPace(1.0).after(0.5, 500) == 0.5
    assert FixedPace(3.0).after(0.01, 1) == pytest.approx(0.03)
