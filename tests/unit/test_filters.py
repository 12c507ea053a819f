"""The listing's filter (parsing, the time column), its ILIKE pattern and its page as text."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from leasectl.core.errors import UsageError
from leasectl.core.filters import (
    FINISHED,
    JobFilter,
    JobPage,
    ListedJob,
    parse_after,
    parse_filter,
    parse_states,
)
from leasectl.core.models import JobStatus
from leasectl.db.history import STATE_PARAMS, like_pattern, list_params
from leasectl.present.history import list_renderables, page_json


def test_states_any_case_repeated_or_comma_separated() -> None:
    assert parse_states(["FAILED", "stuck,Pending"]) == {
        JobStatus.FAILED,
        JobStatus.STUCK,
        JobStatus.PENDING,
    }
    assert parse_states([" completed "]) == {JobStatus.COMPLETED}
    with pytest.raises(UsageError, match="invalid --state 'Done': use one of Pending"):
        parse_states(["Done"])


def test_every_status_has_its_parameter_in_the_listing() -> None:
    """A status added to the model must be admitted by jobs_list too (a parameter of its own)."""
    assert set(STATE_PARAMS) == set(JobStatus)
    params = list_params(JobFilter(states=frozenset(JobStatus)), limit=5, after=None)
    assert all(params[name] for name in STATE_PARAMS.values())
    assert params["any_state"] is False and params["limit"] == 6


def test_times_are_finish_times_only_when_every_state_asked_for_is_finished() -> None:
    finished = parse_filter(states=["completed", "failed"], since="1h", until="10m")
    assert finished.finished_only and finished.time_column == "finished_at"
    params = list_params(finished, limit=50, after=7)
    assert (params["finished_since"], params["finished_until"]) == (
        timedelta(hours=1),
        timedelta(minutes=10),
    )
    assert params["created_since"] is None and params["after"] == 7
    for states in ([], ["completed", "pending"], ["stuck"]):
        flt = parse_filter(states=states, since="1h")
        assert not flt.finished_only and flt.time_column == "created_at"
        assert list_params(flt, limit=1, after=None)["created_since"] == timedelta(hours=1)
    assert {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED} == FINISHED


@pytest.mark.parametrize(
    ("states", "since", "until", "window_first"),
    [
        (["completed"], "30d", "29d", True),  # a day, a month back: read the day
        (["completed", "failed"], "2d", "1d", False),  # as wide as its distance: walk the ids
        (["failed"], "7d", "1h", False),
        (["failed"], None, "29d", False),  # open: no window to read
        (["failed", "stuck"], "30d", "29d", False),  # times are creation times
    ],
)
def test_a_narrow_window_long_ago_is_read_whole(
    states: list[str], since: str | None, until: str, window_first: bool
) -> None:
    flt = parse_filter(states=states, since=since, until=until)
    assert list_params(flt, limit=50, after=None)["window_first"] is window_first


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("disk full", "%disk full%"),
        ("100%", "%100\\%%"),
        ("a_b", "%a\\_b%"),
        ("a\\b", "%a\\\\b%"),
        ("%_\\", "%\\%\\_\\\\%"),
    ],
)
def test_error_text_is_literal_in_the_pattern(text: str, pattern: str) -> None:
    assert like_pattern(text) == pattern


def test_bad_filters_are_one_line_usage_errors() -> None:
    for kwargs, message in (
        ({"since": "1h", "until": "1h"}, "the window is empty"),
        ({"since": "abc"}, "invalid --since 'abc'"),
        ({"until": "-1s"}, "invalid --until '-1s'"),
        ({"payload": "{"}, "--payload: invalid JSON payload"),
        ({"owner": ""}, "--owner must not be empty"),
        ({"error": ""}, "--error must not be empty"),
        ({"queue": " "}, "--queue must not be empty"),
    ):
        with pytest.raises(UsageError, match=message) as caught:
            parse_filter(**kwargs)
        assert "\n" not in str(caught.value)
    assert parse_filter(until="0").until == timedelta(0)
    assert parse_after(None) is None and parse_after("42") == 42
    with pytest.raises(UsageError, match="invalid --after '4x2'"):
        parse_after("4x2")


NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _page(n: int, *, more: bool) -> JobPage:
    jobs = tuple(
        ListedJob(
            id=10_000_000 + i,
            queue="payments-" + "q" * 40,
            status=JobStatus.COMPLETED if i % 2 else JobStatus.PROCESSING,
            priority=0,
            attempts=1,
            max_attempts=5,
            lease_owner="host-1:1234:abcdef" * 3,
            last_error="boom " * 30,
            last_error_chars=150,
            payload_text='{"k": "' + "v" * 100 + '"}',
            payload_chars=110,
            run_at=NOW,
            created_at=NOW - timedelta(minutes=i),
            updated_at=NOW,
            finished_at=NOW if i % 2 else None,
        )
        for i in range(n, 0, -1)
    )
    flt = JobFilter(
        states=frozenset({JobStatus.COMPLETED, JobStatus.PROCESSING}), error="[bold]x\x1b[2J"
    )
    return JobPage(flt, jobs, jobs[-1].id if more else None, n, None, NOW)


@pytest.mark.parametrize("width", [50, 80, 100, 140])
def test_a_page_keeps_ids_statuses_and_times_whole_at_any_width(width: int) -> None:
    out = io.StringIO()
    console = Console(file=out, width=width, highlight=False, markup=False, emoji=False)
    for part in list_renderables(_page(3, more=True)):
        console.print(part)
    text = out.getvalue()
    assert "\x1b" not in text and "[bold]x\\x1b[2J" in text
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), text
    for i in (1, 2, 3):
        assert str(10_000_000 + i) in text
        assert f"{i}m00s ago" in text
    assert "Completed" in text and "Processing" in text
    assert ("payload" in text) == (width >= 100)
    assert f"next page: --after {10_000_001}" in text


def test_the_json_page_says_where_the_next_one_starts() -> None:
    assert page_json(_page(2, more=True))["next_after"] == 10_000_001
    document = page_json(_page(2, more=False))
    assert document["next_after"] is None
    assert [j["id"] for j in document["jobs"]] == [10_000_002, 10_000_001]
    assert document["jobs"][0]["status"] == "Processing"
    assert document["db_now"] == NOW.isoformat()
