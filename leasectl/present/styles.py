"""One look per state, the same in the CLI and the console: job statuses, owner freshness,
lease states and attempt outcomes."""

from __future__ import annotations

import enum

from rich.text import Text

from leasectl.core.models import Freshness, JobStatus
from leasectl.core.statuses import STATUSES

# A warning (a lease about to lapse, an owner late) and a danger (a lapsed lease, a silent
# owner) look the same wherever they are shown.
RISK_STYLE = "bold yellow"
EXPIRED_STYLE = "bold red"
PAUSED_STYLE = "bold magenta"  # a paused queue: no claims until resumed
LIMITED_STYLE = "bold yellow"  # a limited queue at its cap or out of tokens: due jobs wait

# The look of each status's style key (core/statuses.py): a status names its key there.
STATUS_KEY_STYLE = {
    "waiting": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "quarantined": "bold magenta",
    "cancelled": "dim",
    "keyed": "dim yellow",  # Waiting: behind its concurrency key's head
}
STATUS_STYLE = {s: STATUS_KEY_STYLE[i.style] for s, i in STATUSES.items()}

FRESHNESS_STYLE = {
    Freshness.FRESH: "green",
    Freshness.LATE: RISK_STYLE,
    Freshness.SILENT: EXPIRED_STYLE,
    Freshness.STOPPED: "dim",
    Freshness.UNKNOWN: "dim",
}

# The console marks freshness by shape as well as by colour.
FRESHNESS_MARK = {
    Freshness.FRESH: "● fresh",
    Freshness.LATE: "◐ late",
    Freshness.SILENT: "○ silent",
    Freshness.STOPPED: "■ stopped",
    Freshness.UNKNOWN: "? unknown",
}

OUTCOME_STYLE = {
    "running": "cyan",
    "completed": "green",
    "failed": "red",
    "expired": EXPIRED_STYLE,
    "released": "yellow",
    "marked_stuck": "magenta",
    "requeued": "yellow",
    "cancelled": "dim",
    "snoozed": "blue",  # put off by its handler (migration 21): no attempt spent
}


class LeaseState(enum.Enum):
    """A held lease as a person should see it: fine, ending within a heartbeat, lapsed."""

    OK = "ok"
    AT_RISK = "at risk"
    EXPIRED = "expired"


LEASE_STYLE = {
    LeaseState.OK: "green",
    LeaseState.AT_RISK: RISK_STYLE,
    LeaseState.EXPIRED: EXPIRED_STYLE,
}


def status_text(status: JobStatus, *, bold: bool = False) -> Text:
    style = STATUS_STYLE.get(status, "")
    if bold and "bold" not in style:
        style = f"bold {style}".strip()
    return Text(status.value, style=style)
