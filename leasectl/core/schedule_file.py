"""`leasectl schedule sync FILE.toml`: the schedules a file declares, and what syncing them
changes.

The file has one table per schedule::

    [schedules.nightly-report]
    cron = "30 2 * * *"
    timezone = "Europe/Berlin"   # default UTC
    queue = "reports"
    payload = { kind = "nightly" }   # a table, or any TOML value: the JSON of each job
    priority = 0                  # default 0
    max_attempts = 5              # default 5
    catch_up = "last"             # none, last (default) or all
    catch_up_limit = 10           # default 10
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Literal

from leasectl.core.errors import UsageError
from leasectl.core.literal import echo
from leasectl.core.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_LIMIT,
    Schedule,
    ScheduleSpec,
    check_spec,
)

MAX_FILE_BYTES = 16 * 1024 * 1024
_KEYS = {
    "cron",
    "timezone",
    "queue",
    "payload",
    "priority",
    "max_attempts",
    "catch_up",
    "catch_up_limit",
}
Change = Literal["add", "update", "same", "remove"]


@dataclass(frozen=True)
class SyncStep:
    name: str
    change: Change
    spec: ScheduleSpec | None  # None for a removal


def _json_default(value: Any) -> str:
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def _typed(table: dict[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    value = table.get(key, default)
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise UsageError(f"{where}: {key} must be {kind.__name__}, got {echo(repr(value))}")
    return value


def parse_file(path: Path) -> list[ScheduleSpec]:
    """The schedules of ``path``, each checked (one line and exit 2 for the first bad one)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {echo(str(path))}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"{echo(str(path))}: larger than {MAX_FILE_BYTES:,} bytes")
    try:
        document = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{echo(str(path))}: not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{echo(str(path))}: invalid TOML: {exc}") from None
    unknown = set(document) - {"schedules"}
    if unknown:
        raise UsageError(f"{echo(str(path))}: unknown table {echo(sorted(unknown)[0])}")
    tables = document.get("schedules", {})
    if not isinstance(tables, dict):
        raise UsageError(f"{echo(str(path))}: schedules must be a table of tables")
    specs = []
    for name, table in tables.items():
        where = f"schedule {echo(name)}"
        if not isinstance(table, dict):
            raise UsageError(f"{where}: must be a table")
        extra = set(table) - _KEYS
        if extra:
            raise UsageError(f"{where}: unknown key {echo(sorted(extra)[0])}")
        for key in ("cron", "queue"):
            if key not in table:
                raise UsageError(f"{where}: {key} is required")
        payload = json.dumps(table.get("payload", {}), default=_json_default, ensure_ascii=False)
        spec = ScheduleSpec(
            name=name,
            cron=_typed(table, "cron", str, None, where),
            queue=_typed(table, "queue", str, None, where),
            timezone=_typed(table, "timezone", str, "UTC", where),
            payload=payload,
            priority=_typed(table, "priority", int, 0, where),
            max_attempts=_typed(table, "max_attempts", int, 5, where),
            catch_up=_typed(table, "catch_up", str, DEFAULT_CATCH_UP, where),
            catch_up_limit=_typed(table, "catch_up_limit", int, DEFAULT_CATCH_UP_LIMIT, where),
        )
        try:
            specs.append(check_spec(spec))
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return specs


def same(spec: ScheduleSpec, s: Schedule) -> bool:
    """Whether the stored schedule has exactly the declared settings (as schedule_put sees it:
    the payload compared as JSON values)."""
    return (
        spec.cron == s.cron
        and spec.timezone == s.timezone
        and spec.queue == s.queue
        and json.loads(spec.payload) == s.payload
        and spec.priority == s.priority
        and spec.max_attempts == s.max_attempts
        and spec.catch_up == s.catch_up
        and spec.catch_up_limit == s.catch_up_limit
    )


def plan_sync(
    specs: Sequence[ScheduleSpec], existing: Sequence[Schedule], *, prune: bool
) -> list[SyncStep]:
    """What syncing ``specs`` over ``existing`` changes, by name: add, update, same, and (with
    ``prune``) remove for the stored schedules the file does not declare."""
    stored = {s.name: s for s in existing}
    steps = []
    for spec in specs:
        old = stored.get(spec.name)
        change: Change = "add" if old is None else ("same" if same(spec, old) else "update")
        steps.append(SyncStep(spec.name, change, spec))
    if prune:
        declared = {spec.name for spec in specs}
        steps += [SyncStep(n, "remove", None) for n in sorted(stored) if n not in declared]
    return sorted(steps, key=lambda step: step.name)
