"""The rules of an action on a filter (core/bulk.py), and the count's statement kept the same
filter as the listing's."""

from __future__ import annotations

import re

import pytest

from leasectl.core.bulk import audit_reason, check_filter, narrow
from leasectl.core.errors import UsageError
from leasectl.core.filters import JobFilter, parse_filter
from leasectl.core.models import JobStatus
from leasectl.db import sql as queries

REQUEUE = frozenset({JobStatus.PROCESSING, JobStatus.STUCK, JobStatus.FAILED})


def _where(name: str) -> list[str]:
    """The predicates of a statement's filter: its WHERE up to ORDER BY or LIMIT, a line each,
    whitespace normalised."""
    text = queries.get(name).text
    body = text[text.index("WHERE") : re.search(r"\n\s*(ORDER BY|LIMIT)", text).start()]  # type: ignore[union-attr]
    return [" ".join(line.split()) for line in body.splitlines()]


def test_the_count_filters_exactly_as_the_listing() -> None:
    """jobs_count repeats jobs_list's predicates (a count cannot share the listing's ORDER BY
    and LIMIT): a part added to one and not the other fails here."""
    assert _where("jobs_count") == _where("jobs_list")
    assert len(_where("jobs_list")) >= 16


def test_narrow_keeps_given_states_and_fills_in_the_actions_own() -> None:
    assert narrow(JobFilter(queue="q"), "requeue", REQUEUE) == JobFilter(states=REQUEUE, queue="q")
    given = parse_filter(states=["failed"], queue="q")
    assert narrow(given, "requeue", REQUEUE) is given
    with pytest.raises(UsageError, match="requeue never applies to a Pending or Completed job"):
        narrow(parse_filter(states=["pending,completed,failed"]), "requeue", REQUEUE)


def test_an_empty_filter_needs_all_and_all_needs_no_filter() -> None:
    with pytest.raises(UsageError, match="or --all"):
        check_filter(JobFilter(), everything=False)
    check_filter(JobFilter(), everything=True)
    check_filter(JobFilter(queue="q"), everything=False)
    with pytest.raises(UsageError, match="--all is for no filter"):
        check_filter(JobFilter(queue="q"), everything=True)


def test_the_audit_reason_names_the_filter() -> None:
    flt = parse_filter(states=["failed"], queue="payments", since="1h")
    assert audit_reason(flt, None) == "by filter: --state Failed --queue payments --since 1h00m"
    assert (
        audit_reason(flt, "INC-1")
        == "INC-1 (by filter: --state Failed --queue payments --since 1h00m)"
    )
