"""Failed attempts grouped by kind (`leasectl errors`): the class of a handler's exception, else
the first line with what varies per job made placeholders."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from leasectl.core.errorgroups import (
    ErrorReport,
    FailedAttempt,
    error_kind,
    group_failures,
    normalise,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_numbers_hex_and_uuids_become_placeholders() -> None:
    assert normalise("503 for invoice 1") == normalise("503 for invoice 2") == "<n> for invoice <n>"
    assert normalise("bad ref 0x7f3a in 1.5s") == "bad ref <hex> in <n>s"
    assert normalise("object deadbeef42 gone") == "object <hex> gone"
    assert normalise("tx 123e4567-e89b-12d3-a456-426614174000 lost") == "tx <uuid> lost"
    assert normalise("  two   spaces\there ") == "two spaces here"


def test_words_without_digits_stay_words() -> None:
    assert normalise("CardDeclined: insufficient funds") == "CardDeclined: insufficient funds"
    assert normalise("facade cafe") == "facade cafe"  # hex letters only: a word


def test_a_traced_error_is_grouped_by_its_class() -> None:
    assert error_kind("PSPError: 503 for invoice 7", traced=True) == "PSPError"
    assert error_kind("payments.psp.PSPError: timeout", traced=True) == "payments.psp.PSPError"
    assert error_kind("CardDeclined", traced=True) == "CardDeclined"
    assert error_kind("SystemExit: 3\nmore", traced=True) == "SystemExit"


def test_an_untraced_error_is_grouped_by_its_normalised_first_line() -> None:
    # No traceback: no class to trust (a job whose values could not be loaded, an old attempt).
    assert (
        error_kind("PSPError: 503 for invoice 7", traced=False) == "PSPError: <n> for invoice <n>"
    )
    assert error_kind("503 for invoice 1\nTraceback ...", traced=False) == "<n> for invoice <n>"
    # A traced error whose first line names no class falls back to the line.
    assert error_kind("503: for invoice 1", traced=True) == "<n>: for invoice <n>"
    assert error_kind(None, traced=False) == "(no error text)"
    assert error_kind("", traced=True) == "(no error text)"


def attempt(job: int, minute: int, error: str, *, traced: bool = True, queue: str = "payments"):
    return FailedAttempt(job, queue, T0 + timedelta(minutes=minute), error, traced)


def test_groups_count_first_last_queues_and_the_latest_job() -> None:
    attempts = [
        attempt(1, 1, "PSPError: 503 for invoice 1"),
        attempt(2, 5, "PSPError: 503 for invoice 2", queue="refunds"),
        attempt(3, 3, "PSPError: 503 for invoice 3"),
        attempt(4, 2, "CardDeclined: card 4242"),
    ]
    psp, declined = group_failures(attempts)
    assert (psp.error, psp.count, psp.example_job) == ("PSPError", 3, 2)
    assert (psp.first_at, psp.last_at) == (T0 + timedelta(minutes=1), T0 + timedelta(minutes=5))
    assert psp.queues == ("payments", "refunds")
    assert (declined.error, declined.count, declined.example_job) == ("CardDeclined", 1, 4)


def test_the_largest_group_comes_first() -> None:
    attempts = [attempt(i, i, "A: x") for i in range(2)] + [
        attempt(10 + i, i, "B: y") for i in range(30)
    ]
    assert [g.error for g in group_failures(attempts)] == ["B", "A"]
    assert group_failures([]) == ()


def test_a_report_is_truncated_when_the_read_stopped_at_its_cap() -> None:
    report = ErrorReport(None, timedelta(hours=1), T0, (), scanned=100, scan_cap=100)
    assert report.truncated and report.window_start == T0 - timedelta(hours=1)
    assert not ErrorReport(None, timedelta(hours=1), T0, (), scanned=99, scan_cap=100).truncated


@given(st.text(max_size=80))
def test_normalising_twice_changes_nothing(line: str) -> None:
    once = normalise(line)
    assert normalise(once) == once


@given(st.text(alphabet="abcxyz :/-", max_size=30), st.integers(0, 10**12), st.integers(0, 10**12))
def test_lines_that_differ_only_in_a_number_are_one_group(prefix: str, a: int, b: int) -> None:
    assert error_kind(f"{prefix} {a} end", traced=False) == error_kind(
        f"{prefix} {b} end", traced=False
    )
