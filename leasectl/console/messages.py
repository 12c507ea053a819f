"""What worker threads tell the UI thread. Threads never touch widgets: they post one of these."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from leasectl.console.view import Action, ConsoleFilter
from leasectl.core.bulk import BulkPlan, BulkProgress, BulkResult
from leasectl.core.filters import JobFilter, JobPage
from leasectl.core.limits import QueueLimit
from leasectl.core.models import ActionResult, JobDetail, PausedQueue, Snapshot


@dataclass
class SnapshotLoaded(Message):
    """A poll succeeded. ``started`` is the local monotonic time the poll began."""

    snapshot: Snapshot
    filter: ConsoleFilter
    started: float
    took: float

    def can_replace(self, message: Message) -> bool:
        # A newer snapshot makes an older one still in the queue worthless.
        return isinstance(message, SnapshotLoaded)


@dataclass
class PollFailed(Message):
    """A poll failed; ``lost`` when the connection (not the query) is the problem."""

    error: str
    lost: bool
    took: float


@dataclass
class PrivilegeChecked(Message):
    can_update: bool


@dataclass
class ActionFinished(Message):
    action: Action
    result: ActionResult


@dataclass
class ActionFailed(Message):
    action: Action
    error: str


@dataclass
class QueueToggled(Message):
    """A pause or resume ran. ``pause``: the new pause, the one that stood (``changed``
    False), or the one a resume ended (None: the queue was not paused)."""

    queue: str
    resumed: bool
    pause: PausedQueue | None
    changed: bool


@dataclass
class QueueToggleFailed(Message):
    queue: str
    resumed: bool
    error: str


@dataclass
class QueueLimited(Message):
    """A limit was set or lifted. ``limit``: the limits now set, or those lifted (``cleared``;
    None: the queue had none, nothing changed)."""

    queue: str
    cleared: bool
    limit: QueueLimit | None


@dataclass
class QueueLimitFailed(Message):
    queue: str
    error: str


@dataclass
class DetailLoaded(Message):
    detail: JobDetail


@dataclass
class DetailFailed(Message):
    job_id: int
    error: str


@dataclass
class FindLoaded(Message):
    """A page of the find screen; ``search``: which search it answers (a newer one, or a
    cancelled one, makes it stale)."""

    page: JobPage
    search: int


@dataclass
class FindFailed(Message):
    error: str
    search: int


@dataclass
class BulkCounted(Message):
    """The count of an "act on all matching" (``plan`` None: counting ran out of time, said
    in ``error``), for its confirmation."""

    action: str
    filter: JobFilter
    plan: BulkPlan | None
    error: str | None = None


@dataclass
class BulkProgressed(Message):
    action: str
    progress: BulkProgress


@dataclass
class BulkFinished(Message):
    result: BulkResult


@dataclass
class BulkFailed(Message):
    action: str
    error: str
