"""The panels' tables: for each, its columns, how they give way when the panel is narrow, and
the cells of a row (``PanelTable``, in ``panel_table.py``, draws and syncs them)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text

from leasectl.console import view
from leasectl.console.view import Verdict
from leasectl.console.widgets.panel_table import PanelTable, RowContext
from leasectl.core.filters import ListedJob
from leasectl.core.models import JobStatus, OwnerHealth, PanelJob
from leasectl.present.styles import (
    EXPIRED_STYLE,
    FRESHNESS_MARK,
    FRESHNESS_STYLE,
    LEASE_STYLE,
    LIMITED_STYLE,
    PAUSED_STYLE,
    RISK_STYLE,
    STATUS_STYLE,
    LeaseState,
)
from leasectl.present.text import lit
from leasectl.present.times import age, countdown, due_text, lease_intervals, waiting_text

# (PanelTable and RowContext are imported from here by the screens and the tests.)
__all__ = [
    "FailedTable",
    "FindTable",
    "JobTable",
    "OwnersTable",
    "PanelTable",
    "PendingTable",
    "ProcessingTable",
    "RowContext",
    "StuckTable",
]

SELECTED_MARK = "●"


class JobTable(PanelTable[PanelJob]):
    def key_of(self, item: PanelJob) -> str:
        return str(item.id)

    @staticmethod
    def id_cell(job: PanelJob, ctx: RowContext, style: str = "") -> Text:
        if job.id in ctx.selected:
            return Text.assemble((SELECTED_MARK + " ", "bold magenta"), (str(job.id), style))
        return Text("  " + str(job.id), style=style)

    @staticmethod
    def attempts_cell(job: PanelJob, style: str = "") -> Text:
        spent = job.attempts >= job.max_attempts
        return Text(f"{job.attempts}/{job.max_attempts}", style=style or ("red" if spent else ""))


class PendingTable(JobTable):
    # RUN AT holds "⏳ rate-limited" (15 cells: a limit holds the job back): the queue, the
    # wait and the priority give up a little width for it first.
    FLEX: ClassVar[dict[str, int]] = {
        "queue": 8,
        "waiting": 7,
        "priority": 3,
        "run_at": 10,
        "key": 8,
    }
    DROP = ("priority", "attempts", "key", "run_at")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("priority", "PRI", 4),
        ("waiting", "WAITING", 8),
        ("attempts", "ATT", 5),
        ("run_at", "RUN AT", 15),
        ("key", "KEY", 16),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        delayed = item.run_at > ctx.now
        behind_key = item.status == JobStatus.WAITING  # behind its concurrency key's head
        dim = "dim" if delayed or behind_key else ""
        paused = item.queue in ctx.paused
        # (A limit holds back a due Pending job; a Waiting one waits for its key first.)
        held = None if paused or delayed or behind_key else ctx.held.get(item.queue)
        due_style = (
            PAUSED_STYLE if paused else LIMITED_STYLE if held else "cyan" if delayed else "dim"
        )
        return (
            self.id_cell(item, ctx, dim),
            lit(item.queue, dim, no_wrap=True, overflow="ellipsis"),
            Text(str(item.priority), style=dim, justify="right"),
            Text(waiting_text(ctx.now, item.run_at), justify="right"),
            self.attempts_cell(item, dim),
            Text(due_text(ctx.now, item.run_at, paused=paused, held=held), style=due_style),
            key_cell(item),
        )


def key_cell(job: PanelJob) -> Text:
    """A job's concurrency key; a Waiting job's says it waits, and for which job."""
    if job.concurrency_key is None:
        return Text("")
    cell = Text(no_wrap=True, overflow="ellipsis")
    if job.status == JobStatus.WAITING:
        holder = f" {job.key_holder}" if job.key_holder is not None else ""
        cell.append(f"⏳ key busy{holder} ", style="yellow")
    cell.append_text(lit(job.concurrency_key, no_wrap=True, overflow="ellipsis"))
    return cell


class ProcessingTable(JobTable):
    # An owner id (host:pid:hex) is kept whole: the attempts column goes first.
    FLEX: ClassVar[dict[str, int]] = {"queue": 8}
    # (What the handler reported, ctx.progress: the first to go when narrow.)
    DROP = ("progress", "attempts", "heartbeat", "queue")
    COLUMNS = (
        ("state", "STATE", 9),
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("lease", "LEASE", 8),
        ("owner", "OWNER", 24),
        ("heartbeat", "HB AGE", 7),
        ("attempts", "ATT", 5),
        ("progress", "%", 4),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        state = view.lease_state(item, ctx.now, ctx.risk_window)
        # A row in trouble is coloured whole; a healthy one only in its marker.
        style = "" if state is LeaseState.OK else LEASE_STYLE[state]
        marker = {
            LeaseState.OK: Text("  ok", style=LEASE_STYLE[state]),
            LeaseState.AT_RISK: Text("⚠ at risk", style=style),
            LeaseState.EXPIRED: Text("✖ expired", style=f"{style} reverse"),
        }[state]
        return (
            marker,
            self.id_cell(item, ctx, style),
            lit(item.queue, style, no_wrap=True, overflow="ellipsis"),
            Text(countdown(ctx.now, item.lease_until), style=style, justify="right"),
            lit(view.short_owner(item.lease_owner, 24), style, no_wrap=True, overflow="ellipsis"),
            Text(age(ctx.now, item.heartbeat_at), justify="right"),
            self.attempts_cell(item, style),
            progress_cell(item.progress),
        )


def progress_cell(progress: float | None) -> Text:
    """A handler's reported progress as a whole percentage ("" when it reported none)."""
    return Text("" if progress is None else f"{progress * 100:.0f}%", justify="right")


class StuckTable(JobTable):
    FLEX: ClassVar[dict[str, int]] = {"error": 12, "diagnosis": 26, "owner": 20, "queue": 8}
    # Narrow, the panel keeps what decides an action: the diagnosis and the last owner (at 80
    # columns both whole, the last error left to the detail screen).
    DROP = ("attempts", "lapsed", "queue", "error", "state")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("state", "STATE", 7),
        ("lapsed", "LAPSED", 7),
        ("attempts", "ATT", 5),
        ("diagnosis", "DIAGNOSIS", 36),
        ("owner", "LAST OWNER", 24),
        ("error", "LAST ERROR", 46),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        expired = item.status == JobStatus.PROCESSING
        diagnosis = view.diagnose(item, ctx.owners)
        mark, diag_style = {
            Verdict.ALIVE: ("⚠ ", RISK_STYLE),
            Verdict.SILENT: ("○ ", "cyan"),
            Verdict.UNKNOWN: ("? ", "dim"),
            Verdict.QUARANTINED: ("⊘ ", STATUS_STYLE[JobStatus.STUCK]),
        }[diagnosis.verdict]
        # (The text quotes an actor and a reason already escaped: a Text, never markup.)
        diag = Text(mark + diagnosis.text, style=diag_style, no_wrap=True, overflow="ellipsis")
        lapsed = item.lapsed_at or item.lease_until
        error = (item.last_error or "")[:200].replace("\n", " ")
        return (
            self.id_cell(item, ctx, EXPIRED_STYLE if expired else ""),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            Text("expired", style=EXPIRED_STYLE)
            if expired
            else Text("Stuck", style=STATUS_STYLE[JobStatus.STUCK]),
            Text(age(ctx.now, lapsed), justify="right"),
            self.attempts_cell(item),
            diag,
            lit(view.short_owner(item.lease_owner, 24), no_wrap=True, overflow="ellipsis"),
            lit(error, "dim", no_wrap=True, overflow="ellipsis"),
        )


class OwnersTable(PanelTable[OwnerHealth]):
    FLEX: ClassVar[dict[str, int]] = {"queues": 6, "owner": 20}
    DROP = ("queues", "intervals", "next", "seen")
    COLUMNS = (
        ("owner", "OWNER", 34),
        ("freshness", "FRESHNESS", 10),
        ("seen", "LAST SIGN", 9),
        ("held", "HELD", 5),
        ("expired", "EXPIRED", 7),
        ("next", "EXPIRES", 8),
        ("intervals", "HB/TTL", 9),
        ("queues", "QUEUES", 24),
    )

    def key_of(self, item: OwnerHealth) -> str:
        return item.owner

    def cells(self, item: OwnerHealth, ctx: RowContext) -> tuple[Text, ...]:
        style = FRESHNESS_STYLE[item.freshness]
        nxt = item.next_expiry_at
        if nxt is None:
            next_text = Text("-", style="dim", justify="right")
        else:
            lapsed = nxt < ctx.now
            next_text = Text(
                countdown(ctx.now, nxt), style=EXPIRED_STYLE if lapsed else "", justify="right"
            )
        intervals = lease_intervals(item.heartbeat_every, item.lease_ttl)
        owner = lit(item.owner, no_wrap=True, overflow="ellipsis")
        host = f"{item.hostname}:{item.pid}" if item.hostname else ""
        if host and not item.owner.startswith(host):
            owner.append_text(lit(f" ({host})", "dim"))  # the default worker id already says it
        return (
            owner,
            Text(FRESHNESS_MARK[item.freshness], style=style),
            Text(age(ctx.now, item.last_sign_of_life), style=style, justify="right"),
            Text(str(item.held), justify="right"),
            Text(str(item.expired), style=EXPIRED_STYLE if item.expired else "", justify="right"),
            next_text,
            Text(intervals, style="dim"),
            lit(", ".join(item.queues), "dim", no_wrap=True, overflow="ellipsis"),
        )


class FailedTable(JobTable):
    """The Failed panel: the jobs that ran out of attempts, newest first. The error's class
    (without its module) and its first line (the detail screen shows all of it)."""

    FLEX: ClassVar[dict[str, int]] = {"error": 20, "class": 12, "queue": 8}
    DROP = ("attempts", "class", "queue")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("attempts", "ATT", 5),
        ("class", "ERROR CLASS", 18),
        ("error", "LAST ERROR (first line)", 60),
        ("when", "FAILED", 8),
    )
    # A cell's text is cut here (an ellipsis) before the column cuts it further.
    ERROR_CHARS = 120

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        klass, first = view.error_parts(item.last_error)
        return (
            self.id_cell(item, ctx),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            self.attempts_cell(item),
            lit(view.cut(view.short_class(klass), 40), "red", no_wrap=True, overflow="ellipsis")
            if klass
            else Text("-", style="dim"),
            lit(view.cut(first, self.ERROR_CHARS), no_wrap=True, overflow="ellipsis"),
            Text(age(ctx.now, item.finished_at), justify="right"),
        )


class FindTable(PanelTable[ListedJob]):
    """The find screen's results: a page of `leasectl list`, newest first."""

    FLEX: ClassVar[dict[str, int]] = {"payload": 12, "error": 16, "queue": 8, "owner": 10}
    DROP = ("payload", "owner", "attempts", "queue")
    COLUMNS = (
        ("id", "ID", 9),
        ("state", "STATE", 10),
        ("queue", "QUEUE", 12),
        ("attempts", "ATT", 5),
        ("owner", "OWNER", 18),
        ("error", "LAST ERROR (first line)", 44),
        ("payload", "PAYLOAD", 30),
        ("when", "AGE", 8),
    )
    CHARS = 120

    def key_of(self, item: ListedJob) -> str:
        return str(item.id)

    def cells(self, item: ListedJob, ctx: RowContext) -> tuple[Text, ...]:
        klass, first = view.error_parts(item.last_error)
        error = f"{view.short_class(klass)}: {first}" if klass else first
        moment = item.finished_at or item.created_at
        return (
            Text(str(item.id), justify="right"),
            Text(item.status.value, style=STATUS_STYLE.get(item.status, "")),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            Text(f"{item.attempts}/{item.max_attempts}"),
            lit(view.short_owner(item.lease_owner, 40), "dim", no_wrap=True, overflow="ellipsis"),
            lit(view.cut(error, self.CHARS), no_wrap=True, overflow="ellipsis")
            if error
            else Text("-", style="dim"),
            lit(
                view.cut(item.payload_text or f"({item.payload_bytes or 0:,} bytes)", self.CHARS),
                "dim",
                no_wrap=True,
                overflow="ellipsis",
            ),
            Text(age(ctx.now, moment), justify="right"),
        )
