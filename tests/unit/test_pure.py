"""Pure logic: backoff, freshness, the SQL loader, and the core/console import boundary."""

from __future__ import annotations

import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leasectl.core import health
from leasectl.core.backoff import retry_delay
from leasectl.core.models import Freshness
from leasectl.core.tracebacks import DETAIL_HEAD, DETAIL_LIMIT, cut_middle
from leasectl.db import sql as queries


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_retry_delay_is_bounded_and_grows(attempt: int, seed: int) -> None:
    base, cap = timedelta(seconds=2), timedelta(minutes=10)
    d = retry_delay(attempt, base=base, cap=cap, rng=random.Random(seed))
    step = min(cap.total_seconds(), base.total_seconds() * 2.0 ** min(attempt - 1, 60))
    assert step / 2 - 1e-6 <= d.total_seconds() <= step + 1e-6
    if attempt > 1:
        prev_step = min(cap.total_seconds(), base.total_seconds() * 2.0 ** min(attempt - 2, 60))
        assert d.total_seconds() >= prev_step / 2 - 1e-6


def test_retry_delay_has_jitter() -> None:
    rng = random.Random(1)
    delays = {retry_delay(5, rng=rng) for _ in range(20)}
    assert len(delays) > 10


def test_retry_delay_rejects_attempt_zero() -> None:
    with pytest.raises(ValueError):
        retry_delay(0)


NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (0, Freshness.FRESH),
        (15, Freshness.FRESH),
        (17, Freshness.LATE),
        (29, Freshness.LATE),
        (30, Freshness.SILENT),
        (300, Freshness.SILENT),
    ],
)
def test_freshness_against_declared_intervals(age: int, expected: Freshness) -> None:
    got = health.classify(
        NOW, NOW - timedelta(seconds=age), timedelta(seconds=10), timedelta(seconds=30)
    )
    assert got == expected


def test_freshness_of_unregistered_and_stopped_owners() -> None:
    last = NOW - timedelta(seconds=5)
    assert health.classify(NOW, last, None, None) == Freshness.UNKNOWN
    assert (
        health.classify(NOW, last, None, None, next_expiry_at=NOW - timedelta(seconds=1))
        == Freshness.SILENT
    )
    assert health.classify(NOW, last, None, None, stopped_at=last) == Freshness.STOPPED


def test_every_query_has_a_description_and_entity_verb_name() -> None:
    found = queries.all_queries()
    assert {
        "jobs_complete_and_claim",
        "jobs_claim_expired",
        "job_claim_by_id",
        "jobs_heartbeat",
        "jobs_requeue_expired",
    } <= set(found)
    for name, query in found.items():
        assert query.description, name
        assert "_" in name, name


def test_parser_rejects_a_block_without_description() -> None:
    with pytest.raises(ValueError, match="description"):
        queries.parse("-- name: x_y\nSELECT 1;\n")


def test_schema_is_rendered_as_an_identifier() -> None:
    text = queries.get("job_get").render('we"ird').as_string(None)
    assert '"we""ird".jobs' in text


def test_core_never_imports_textual() -> None:
    code = (
        "import sys, leasectl.cli, leasectl.db.work, leasectl.db.operations,"
        " leasectl.runtime.worker, leasectl.runtime.watcher;"
        "print('textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@given(st.integers(min_value=0, max_value=500))
def test_reconnect_delay_is_capped_and_jittered(failures: int) -> None:
    from leasectl.core.backoff import reconnect_delay

    step = min(30.0, 0.5 * 2.0 ** min(failures, 60))
    assert step / 2 <= reconnect_delay(failures, base=0.5) <= step


def test_a_long_traceback_keeps_its_start_and_end_and_says_what_was_cut() -> None:
    short = "Traceback (most recent call last):\n  x\nValueError: no"
    assert cut_middle(short, DETAIL_LIMIT, head=DETAIL_HEAD) == short
    exact = "y" * DETAIL_LIMIT
    assert cut_middle(exact, DETAIL_LIMIT, head=DETAIL_HEAD) == exact
    for size in (DETAIL_LIMIT + 1, 100_000, 10**7):
        text = "H" * DETAIL_HEAD + "m" * (size - DETAIL_LIMIT) + "T" * (DETAIL_LIMIT - DETAIL_HEAD)
        cut = cut_middle(text, DETAIL_LIMIT, head=DETAIL_HEAD)
        head, note, tail = cut.split("\n")
        assert (head, tail) == ("H" * DETAIL_HEAD, "T" * (DETAIL_LIMIT - DETAIL_HEAD))
        assert note == (
            f"… ({size - DETAIL_LIMIT:,} characters cut here: the traceback keeps its first "
            f"{DETAIL_HEAD:,} and its last {DETAIL_LIMIT - DETAIL_HEAD:,} of {size:,})"
        )
        # Migration 8's CHECK leaves 256 characters above the limit for the note.
        assert len(cut) <= DETAIL_LIMIT + 256
