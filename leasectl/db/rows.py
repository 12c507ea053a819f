"""Row builders: database rows made into the core's models (``core/models.py``). A dict row
becomes a model by its field names; many tuple rows (a claim batch, a console refresh, a
watcher pass) are built without a dict or an ``__init__`` each (``from_tuples``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import MISSING, fields
from typing import Any, TypeVar

from leasectl.core.limits import QueueLimit
from leasectl.core.models import (
    STATUS_BY_VALUE,
    Attempt,
    Event,
    ExpiredJob,
    Job,
    JobStatus,
    PanelJob,
    PausedQueue,
)

T = TypeVar("T")

_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return names


def from_row(cls: type[Any], row: dict[str, Any]) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in row.items() if k in names})


def _same(row: Sequence[Any]) -> Sequence[Any]:
    return row


def from_tuples(cls: type[T], names: Sequence[str], rows: Iterable[Sequence[Any]]) -> tuple[T, ...]:
    """Tuple rows (columns ``names``) -> instances of the dataclass ``cls``, its ``status`` field
    (if it has one) made a JobStatus. A column may be missing only for a field with a default;
    extra columns are ignored.

    Many rows come this way (a claim batch, a console refresh, a watcher pass of 100,000, the
    Queues view's minutes of every queue), so each instance's ``__dict__`` is filled in one
    step, without ``__init__``: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, which made this three times slower. Hence ``cls`` must have no
    ``__post_init__`` nor slots; every field is set, as ``__init__`` would set it.
    """
    if hasattr(cls, "__post_init__") or hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} cannot be built without its __init__")
    columns = fields(cls)  # type: ignore[arg-type]
    keys = tuple(f.name for f in columns if f.name in names)
    defaults = {f.name: f.default for f in columns if f.name not in names}
    missing = sorted(name for name, default in defaults.items() if default is MISSING)
    if missing:  # (a default_factory counts as no default)
        raise ValueError(f"{cls.__name__}: no column for {', '.join(missing)}")
    at = [names.index(k) for k in keys]

    def pick(row: Sequence[Any]) -> Sequence[Any]:
        return [row[i] for i in at]

    if at == list(range(len(names))):  # the columns are the fields, in order (the usual case)
        pick = _same
    status = STATUS_BY_VALUE if "status" in keys else None
    new = object.__new__
    made = []
    for row in rows:
        obj = new(cls)
        values = obj.__dict__  # (filled in place: no dict made and copied a row)
        if defaults:
            values.update(defaults)
        values.update(zip(keys, pick(row), strict=True))
        if status is not None:
            values["status"] = status[values["status"]]
        made.append(obj)
    return tuple(made)


def current_progress(row: dict[str, Any]) -> dict[str, Any]:
    """A ``jobs`` row without the progress of an earlier attempt: a report belongs to the
    attempt that made it (``progress_attempt``, migration 32; a claim clears none)."""
    if "progress_attempt" in row and row["progress_attempt"] != row.get("attempts"):
        return {**row, "progress": None, "progress_message": None}
    return row


def job_from_row(row: dict[str, Any]) -> Job:
    job: Job = from_row(Job, {**current_progress(row), "status": JobStatus(row["status"])})
    return job


def attempt_from_row(row: dict[str, Any]) -> Attempt:
    attempt: Attempt = from_row(Attempt, {**row, "outcome": str(row["outcome"])})
    return attempt


def event_from_row(row: dict[str, Any]) -> Event:
    event: Event = from_row(Event, row)
    return event


def paused_from_row(row: dict[str, Any]) -> PausedQueue:
    return PausedQueue(row["queue"], row["paused_at"], row["paused_by"], row["reason"])


def expired_jobs(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> tuple[ExpiredJob, ...]:
    """Tuple rows -> ExpiredJobs: a watcher pass may move 100,000 of them."""
    return from_tuples(ExpiredJob, names, rows)


def panel_jobs(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> tuple[PanelJob, ...]:
    """Tuple rows of a panel query (columns ``names``) -> PanelJobs, without a dict per row:
    a refresh builds up to three panels of them. A column may be missing only for a field
    with a default."""
    return from_tuples(PanelJob, names, rows)


def limit_from_row(row: dict[str, Any]) -> QueueLimit:
    """A row of queue_limits_list (or of a set, clear or ramp: the same columns) -> QueueLimit."""
    return QueueLimit(
        queue=row["queue"],
        concurrency=row["concurrency"],
        rate=row["rate"],
        burst=row["burst"],
        ramp_from=row["ramp_from"],
        ramp_until=row["ramp_until"],
        set_at=row["set_at"],
        set_by=row["set_by"],
        reason=row["reason"],
        throttled=int(row["throttled"]),
        cap_now=row["cap_now"],
        rate_now=row["rate_now"],
        burst_now=row["burst_now"],
        tokens=row["tokens"],
        live=int(row["live"]),
        db_now=row["db_now"],
    )
