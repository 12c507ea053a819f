"""Models built from tuple rows: the same values as their __init__ makes, or a clear error."""

from __future__ import annotations

import dataclasses
from dataclasses import FrozenInstanceError, dataclass, fields
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leasectl.core.models import ExpiredJob, JobStatus, PanelJob
from leasectl.db.rows import expired_jobs, panel_jobs

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PANEL_NAMES = [f.name for f in fields(PanelJob)]


def panel_row(job_id: int, status: str, owner: str | None) -> tuple[object, ...]:
    return (
        job_id,
        "payments",
        status,
        0,
        NOW,
        1,
        5,
        owner,
        NOW + timedelta(seconds=job_id % 1000),
        NOW,
        None,
        NOW,
        NOW,
        timedelta(seconds=10),
        NOW,
        "operator:alice",  # the quarantine's actor, reason and time
        "poison",
        NOW,
        NOW,  # finished_at (the Failed panel's)
        "card-1",  # concurrency_key (migration 18)
        job_id + 1,  # key_holder
        (job_id % 101) / 100,  # progress (migration 21)
    )


@given(
    st.integers(min_value=1, max_value=2**62),
    st.sampled_from([s.value for s in JobStatus]),
    st.none() | st.text(max_size=20),
)
def test_rows_make_what_init_makes(job_id: int, status: str, owner: str | None) -> None:
    row = panel_row(job_id, status, owner)
    [built] = panel_jobs(PANEL_NAMES, [row])
    expected = PanelJob(*row[:2], JobStatus(status), *row[3:])  # type: ignore[arg-type]
    assert built == expected and hash(built) == hash(expected)
    assert vars(built) == vars(expected)
    assert built.status is JobStatus(status)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.id = 0  # type: ignore[misc]


def test_columns_in_another_order_extra_columns_and_defaults() -> None:
    names = ["heartbeat_at", "id", "status", "junk", "queue", "attempts", "max_attempts"]
    names += ["lease_owner", "lease_until"]
    row = (NOW, 7, "Processing", "ignored", "q", 2, 5, "w", NOW)
    [built] = expired_jobs(names, [row])
    assert built == ExpiredJob(7, "q", JobStatus.PROCESSING, 2, 5, "w", NOW, NOW)
    # Fields with defaults may lack a column: PanelJob's risk_window and lapsed_at.
    [panel] = panel_jobs(PANEL_NAMES[:13], [panel_row(3, "Pending", None)[:13]])
    assert (panel.risk_window, panel.lapsed_at) == (None, None)


def test_a_missing_column_without_default_is_an_error() -> None:
    names = [n for n in PANEL_NAMES if n != "queue"]
    with pytest.raises(ValueError, match="queue"):
        panel_jobs(names, [])


def test_a_class_with_post_init_is_refused() -> None:
    @dataclass(frozen=True)
    class Checked:
        id: int
        status: JobStatus

        def __post_init__(self) -> None:
            raise AssertionError("never skipped")

    from leasectl.db.rows import from_tuples

    with pytest.raises(TypeError):
        from_tuples(Checked, ["id", "status"], [(1, "Pending")])


def test_a_model_without_a_status_is_what_its_constructor_makes_and_frozen() -> None:
    from leasectl.core.stats import MinuteStats
    from leasectl.db.rows import from_tuples

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    names = ["start", "completed", "pending", "pending_capped"]
    made = from_tuples(MinuteStats, names, [(t0, 2, 4, True), (t0, 0, None, False)])
    assert made == (
        MinuteStats(t0, completed=2, pending=4, pending_capped=True),
        MinuteStats(t0),
    )
    assert vars(made[1]) == vars(MinuteStats(t0))  # every field set, the defaults too
    assert hash(made[0]) == hash(MinuteStats(t0, completed=2, pending=4, pending_capped=True))
    with pytest.raises(FrozenInstanceError):
        made[0].failed = 0  # type: ignore[misc]
