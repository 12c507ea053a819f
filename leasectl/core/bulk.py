"""Acting on every job a filter matches (`requeue --state failed ...`): what the action may
touch, the reason the audit keeps, and what a run or a dry run reports.

The engine that runs it (in batches, guarded, resumable) is ``runtime/bulk.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from leasectl.core.errors import UsageError
from leasectl.core.filters import JobFilter, JobPage
from leasectl.core.literal import echo
from leasectl.core.models import JobStatus, Skipped

# A run's batch when none is given: chosen by measurement (BENCHMARKS.md, "bulk actions").
DEFAULT_BATCH = 500
MAX_BATCH = 10_000
# What a dry run lists of the jobs it would act on.
SAMPLE = 10


def filter_words(flt: JobFilter) -> str:
    """The filter as the options that made it, for an audit reason (values as given)."""
    return " ".join(f"{option} {value}" for option, value in flt.parts())


def audit_reason(flt: JobFilter, reason: str | None) -> str:
    """The reason each job's audit event keeps: the operator's, and always the filter, so the
    trail says the job was moved by a bulk action and by which filter."""
    by = f"by filter: {filter_words(flt) or '--all'}"
    return f"{reason} ({by})" if reason else by


def narrow(flt: JobFilter, action: str, eligible: frozenset[JobStatus]) -> JobFilter:
    """The filter restricted to the states ``action`` applies to, so that a job the action
    moved no longer matches (a second run continues where the first stopped) and a job it
    could never move is not reported as a skip. A ``--state`` it never applies to is refused."""
    names = ", ".join(s.value for s in JobStatus if s in eligible)
    if flt.states:
        never = [s.value for s in JobStatus if s in flt.states - eligible]
        if never:
            raise UsageError(
                f"{action} never applies to a {' or '.join(never)} job; --state may be {names}"
            )
        return flt
    return replace(flt, states=eligible)


def check_filter(flt: JobFilter, *, everything: bool) -> None:
    """An empty filter must be asked for by name (``--all``), never implied."""
    if not flt.parts() and not everything:
        raise UsageError(
            "give job ids, or a filter (--state, --queue, --owner, --error, --payload, --since, "
            "--until), or --all for every job the action applies to"
        )
    if flt.parts() and everything:
        raise UsageError("--all is for no filter at all: drop it, or drop the filter")


def check_after(after: int | None) -> None:
    if after is not None and after < 1:
        raise UsageError(f"invalid --after {echo(str(after))}")


@dataclass(frozen=True)
class BulkPlan:
    """A dry run: how many jobs match (``capped``: at least ``count``, counting stopped there)
    and the first of them (newest first)."""

    action: str
    filter: JobFilter
    count: int
    capped: bool
    sample: JobPage


@dataclass(frozen=True)
class BulkProgress:
    """After each committed batch: the totals so far and the last id done."""

    batches: int
    matched: int
    changed: int
    skipped: int
    resume_after: int | None


@dataclass(frozen=True)
class BulkResult:
    """A run: ``matched`` jobs read (each in the state the action was guarded on), ``changed``
    moved, ``skipped`` left alone with the reason. ``resume_after``: the lowest id done (the
    next run's ``--after``), None when no batch ran. ``complete``: False when it was stopped
    before the last page. ``batch_seconds``: the time of each guarded batch's statement."""

    action: str
    filter: JobFilter
    reason: str
    matched: int
    changed: int
    skipped: tuple[Skipped, ...]
    batches: int
    resume_after: int | None
    complete: bool
    batch_seconds: tuple[float, ...]
    elapsed_s: float
