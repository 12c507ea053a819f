"""Time phrases: timestamps, ages, countdowns and windows, for the CLI and the console.

Every relative time ("expired 42s ago", "in 12s") is measured against a database timestamp
handed in by the caller, never against this machine's clock. The sentinels ``infinity`` and
``-infinity`` are named, never converted (no time zone can hold them).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.text import Text

from leasectl.core.config import format_duration
from leasectl.core.timestamps import infinity_label, since_forever
from leasectl.present.styles import LEASE_STYLE, LeaseState

# -- moments ----------------------------------------------------------------------------------


def timestamp(value: datetime | None) -> str:
    """The full moment with the offset it was read with, e.g. ``2024-05-01 14:03:07+00:00``."""
    if value is None:
        return "-"
    return infinity_label(value) or value.isoformat(sep=" ", timespec="seconds")


def clock(value: datetime | None) -> str:
    """Compact form for table cells; panels and JSON carry the full timestamp with offset."""
    if value is None:
        return "-"
    return infinity_label(value) or value.strftime("%m-%d %H:%M:%S")


def local_clock(moment: datetime) -> str:
    """A database timestamp in the viewer's time zone, e.g. ``14:03:07 UTC``."""
    if (label := infinity_label(moment)) is not None:
        return label
    local = moment.astimezone()
    return f"{local:%H:%M:%S} {local.tzname() or ''}".rstrip()


def local_stamp(moment: datetime | None) -> str:
    """A full timestamp in the viewer's time zone, e.g. ``2024-05-01 14:03:07 UTC``."""
    if moment is None:
        return "-"
    if (label := infinity_label(moment)) is not None:
        return label
    local = moment.astimezone()
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname() or ''}".rstrip()


# -- ages and countdowns ----------------------------------------------------------------------


def ago(db_now: datetime, then: datetime | None) -> str:
    """``42s ago``, or ``in 12s`` for a time still ahead (both measured on the database clock)."""
    if then is None:
        return "-"
    if (label := infinity_label(then)) is not None:
        return f"at {label}"
    delta = db_now - then
    if delta < timedelta(0):
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def age(now: datetime, moment: datetime | None) -> str:
    """An age in whole seconds, for a cell that ticks: sub-second precision would flicker."""
    if moment is None:
        return "-"
    if (label := infinity_label(moment)) is not None:
        return label
    seconds = int(max(timedelta(0), now - moment).total_seconds())
    return format_duration(float(seconds)) if seconds else "0s"


def seconds_age(seconds: float) -> str:
    """Whole seconds: a refresh age in milliseconds would flicker for nothing."""
    return format_duration(float(int(seconds))) if seconds >= 1 else "0s"


def countdown(now: datetime, until: datetime | None) -> str:
    """Time left (``12s``), or how long ago it ran out (``-1m05s``)."""
    if until is None:
        return "-"
    left = until - now
    if left < timedelta(0):
        return "-" + format_duration(-left)
    return format_duration(left)


PAUSED_MARK = "⏸"
HELD_MARK = "⏳"  # a due job a queue's limit holds back


def due_text(
    now: datetime, run_at: datetime, *, paused: bool = False, held: str | None = None
) -> str:
    """``ready`` for a claimable job, ``in 42s`` for a delayed retry; a job of a paused queue
    is not claimable, due or not: ``⏸ paused``, or ``⏸ in 42s``. ``held``: why a limit holds
    a due job of its queue back (``⏳ at cap``, ``⏳ rate-limited``)."""
    if run_at > now:
        due = "in " + format_duration(run_at - now)
        return f"{PAUSED_MARK} {due}" if paused else due
    if paused:
        return f"{PAUSED_MARK} paused"
    return f"{HELD_MARK} {held}" if held else "ready"


def waiting_text(now: datetime, run_at: datetime) -> str:
    """How long a claimable job has been waiting (since run_at); blank for a delayed retry."""
    if run_at > now:
        return ""
    return oldest_due(now, run_at)


FOREVER = "forever"


def oldest_due(now: datetime, due_at: datetime | None) -> str:
    """How long the oldest due job has waited: ``4m12s``; ``forever`` when it is due since
    '-infinity' (or the schema's earliest run_at, which stands for it); ``-`` for none."""
    if due_at is None:
        return "-"
    if since_forever(due_at):
        return FOREVER
    return format_duration(now - due_at)


def due_age_s(now: datetime, due_at: datetime | None) -> float | None:
    """The same in seconds, for JSON: None for none, and for forever (no number says it)."""
    if due_at is None or since_forever(due_at):
        return None
    return (now - due_at).total_seconds()


def lease_left(db_now: datetime, until: datetime | None) -> Text:
    """``12s left`` while valid, ``expired 42s ago`` once lapsed."""
    if until is None:
        return Text("-")
    left = until - db_now
    if left >= timedelta(0):
        return Text(f"{format_duration(left)} left", style=LEASE_STYLE[LeaseState.OK])
    return Text(f"expired {format_duration(-left)} ago", style=LEASE_STYLE[LeaseState.EXPIRED])


def expiry(db_now: datetime, until: datetime | None) -> Text:
    """When a lease ends, relative: in the expired style once it has."""
    text = ago(db_now, until)
    expired = until is not None and until < db_now
    return Text(text, style=LEASE_STYLE[LeaseState.EXPIRED] if expired else "")


# -- windows and intervals --------------------------------------------------------------------


def short_window(value: timedelta) -> str:
    """``1h``, ``30m``, ``90s``: the round form of a configured window."""
    seconds = value.total_seconds()
    if seconds != int(seconds) or seconds == 0:
        return format_duration(value)
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def interval(value: timedelta | None) -> str:
    """A configured interval in its round form, ``?`` when unknown."""
    return short_window(value) if value is not None else "?"


def lease_intervals(heartbeat_every: timedelta | None, lease_ttl: timedelta | None) -> str:
    """An owner's heartbeat interval and lease TTL, ``10s/1m``; ``-`` when neither is known."""
    if heartbeat_every is None and lease_ttl is None:
        return "-"
    return f"{interval(heartbeat_every)}/{interval(lease_ttl)}"


def read_lag_text(lag: timedelta | None, *, stale: bool) -> Text | None:
    """Where the reads stand against the primary, for the console's header and `status`: None
    when they were read from the primary. ``stale``: behind by more than a lease TTL
    (``core/readlag.py``), when a countdown may be a whole lease off."""
    if lag is None:
        return None
    behind = seconds_age(max(0.0, lag.total_seconds()))
    if stale:
        return Text(f"⚠ countdowns stale: standby {behind} behind", style="bold red")
    if lag > timedelta(0):
        return Text(f"standby {behind} behind", style="yellow")
    return Text("standby caught up", style="dim")
