"""`leasectl tui`: the on-call console.

All database work runs in thread workers that report back with messages (messages.py); the UI
thread only renders. Polls never overlap: the next one is armed when the last one has finished,
after the refresh interval on success and a capped backoff on failure, and not at all while a
modal or the detail screen is open. The data source is injected, so tests and screenshots can
feed fixed data without a database.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import ClassVar

from textual import work
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer

from leasectl.console import view
from leasectl.console.limiting import LimitActions
from leasectl.console.messages import (
    ActionFailed,
    ActionFinished,
    PollFailed,
    PrivilegeChecked,
    QueueToggled,
    QueueToggleFailed,
    SnapshotLoaded,
)
from leasectl.console.poller import PollSchedule
from leasectl.console.queueing import QueueViews
from leasectl.console.screens.confirm import ConfirmScreen, QueueConfirmScreen
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.screens.filter import FilterScreen
from leasectl.console.screens.find import FindScreen
from leasectl.console.screens.help import HelpScreen
from leasectl.console.screens.main import MainScreen
from leasectl.console.source import ConsoleSource, DatabaseSource
from leasectl.console.threads import DaemonExecutor
from leasectl.console.view import Action, ConsoleFilter, DbClock
from leasectl.console.widgets.bars import Status
from leasectl.console.widgets.tables import RowContext
from leasectl.core.actions import ACTIONS as OPERATOR_ACTIONS
from leasectl.core.actions import JobSettings
from leasectl.core.errors import ConnectionFailed, LeasectlError, TerminalGone
from leasectl.core.literal import visible
from leasectl.core.models import ActionResult, PanelJob, SeenState, Snapshot
from leasectl.core.readlag import countdowns_stale
from leasectl.core.statuses import named
from leasectl.core.terminal import HangupWatch

DEFAULT_LIMIT = 100
RISK_WINDOW = timedelta(seconds=10)


def run(
    dsn: str,
    schema: str,
    *,
    refresh: timedelta,
    queue: str | None,
    read_only: bool,
    read_dsn: str | None = None,
) -> None:
    """Connect (raising the core's typed errors before any screen is drawn), then run the app
    until it is closed or its terminal goes away (then `TerminalGone`, within seconds: see
    leasectl/core/terminal.py). ``read_dsn``: the panels are read there (a hot standby), the
    actions sent to ``dsn``."""
    source = DatabaseSource.connect(dsn, schema, risk_window=RISK_WINDOW, read_dsn=read_dsn)
    try:
        app = ConsoleApp(source, refresh=refresh, queue=queue, read_only=read_only)
        with HangupWatch(lambda: app.call_from_thread(app.exit), abandon=source.close) as watch:
            app.run()
    finally:
        source.close()
    if watch.gone.is_set():
        raise TerminalGone(f"the console's terminal went away ({watch.reason})")


class ConsoleApp(LimitActions, QueueViews):
    CSS_PATH = "app.tcss"
    TITLE = "leasectl"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        # (ctrl+c and q: keys.py)
        Binding("question_mark", "help", "Help"),
        Binding("colon", "command_palette", "Commands", show=False),
    ]

    def __init__(
        self,
        source: ConsoleSource,
        *,
        refresh: timedelta = timedelta(seconds=2),
        queue: str | None = None,
        read_only: bool = False,
        limit: int = DEFAULT_LIMIT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.source = source
        self.schedule = PollSchedule(max(0.1, refresh.total_seconds()))
        self.filter = ConsoleFilter(queue=queue)
        self.read_only: str | None = "started with --read-only" if read_only else None
        self.limit = limit
        self.clock = clock
        # The last good data and when (local monotonic time) it was read.
        self.snapshot: Snapshot | None = None
        self.db_clock: DbClock | None = None
        self.last_ok: float | None = None
        self.took: float | None = None
        # The poll loop.
        self.connected: bool | None = None
        self.error: str | None = None
        self.polling = False
        self.poll_pending = False
        self.next_poll_at: float | None = None
        self.polls = 0
        self.failures = 0
        self._timer: Timer | None = None
        # Actions.
        self.selected: set[int] = set()
        self.acting = False
        self.privileges_checked = False
        self.last_result: ActionResult | None = None
        self.last_error: str | None = None
        # The find screen's filter, as last typed: the next `f` starts from it.
        self.find_text = ""

    def get_default_screen(self) -> Screen[None]:
        return MainScreen(self)

    @property
    def main(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    async def action_quit(self) -> None:
        # A call the server does not answer must not hold the exit.
        self.source.abort()
        await super().action_quit()

    def start(self) -> None:
        """Called once the main screen is mounted: only then can results be shown."""
        asyncio.get_running_loop().set_default_executor(DaemonExecutor())
        self.sub_title = visible(self.source.where)
        self.set_interval(1.0, self._tick)
        self._check_privileges()
        self.poll_now()

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every notification (widgets' and screens' too) is plain text: never markup, whatever
        ``markup`` says, and controls escaped. Messages quote filters, owners, skip reasons and
        database errors; the data in them is escaped where the message is made, so that a
        newline in a value does not pass for the message's own."""
        super().notify(
            visible(message, multiline=True),
            title=visible(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    # -- time -------------------------------------------------------------------------------

    def db_now(self) -> datetime | None:
        """The read clock now: the last poll's, plus local monotonic time elapsed unless it was
        a standby's replay time (``DbClock.frozen``)."""
        return self.db_clock.at(self.clock()) if self.db_clock is not None else None

    def row_context(self) -> RowContext | None:
        now = self.db_now()
        if now is None or self.snapshot is None:
            return None
        return RowContext(
            now=now,
            selected=frozenset(self.selected),
            owners=view.owners_by_id(self.snapshot),
            risk_window=self.snapshot.risk_window,
            paused=view.paused_queues(self.snapshot),
            held=view.held_back(self.snapshot),
        )

    def status(self) -> Status:
        mono = self.clock()
        snap = self.snapshot
        return Status(
            where=self.source.where,
            read_where=self.source.read_where,
            read_lag=snap.read_lag if snap is not None else None,
            lag_stale=snap is not None and countdowns_stale(snap.read_lag, snap.owners),
            server_version=self.snapshot.server_version if self.snapshot else None,
            db_now=self.db_now(),
            since_refresh=mono - self.last_ok if self.last_ok is not None else None,
            took=self.took,
            connected=self.connected,
            error=self.error,
            retry_in=self.next_poll_at - mono if self.next_poll_at is not None else None,
            attempt=self.failures,
            read_only=self.read_only,
            filter=self.filter,
            polling=self.polling,
        )

    def _tick(self) -> None:
        if not self.paused:  # the main screen is in sight
            self._redraw(full=False)

    def _redraw(self, *, full: bool) -> None:
        """Show the app's state on the main screen, unless the app is shutting down.

        Poll results, privilege checks and ticks arrive from threads and timers at any
        moment, including while the app closes and removes its screens and widgets.
        """
        if not self.is_running or not self.screen_stack or not self.main.is_attached:
            return
        self.main.refresh_view(full=full)

    # -- polling ----------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Polling pauses while anything is stacked over the main screen."""
        return len(self.screen_stack) > 1

    def poll_now(self) -> None:
        if not self.is_running:
            return  # e.g. an action that finished as the console closed
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.polling or self.paused:
            self.poll_pending = True
            return
        self.polling = True
        self.poll_pending = False
        self.next_poll_at = None
        self._poll(self.filter, self.limit)

    def resume_polling(self) -> None:
        """Back on the main screen: poll at once if a poll fell due while it was covered."""
        due = self.next_poll_at is not None and self.clock() >= self.next_poll_at
        if self.poll_pending or due:
            self.poll_now()
        self._redraw(full=False)

    def _arm(self, delay: float) -> None:
        if self.poll_pending:
            self.poll_now()
            return
        self.next_poll_at = self.clock() + delay
        self._timer = self.set_timer(delay, self.poll_now)

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll")
    def _poll(self, flt: ConsoleFilter, limit: int) -> None:
        started = self.clock()
        try:
            snapshot = self.source.snapshot(flt, limit)
        except LeasectlError as exc:
            lost = isinstance(exc, ConnectionFailed)
            self.post_message(PollFailed(str(exc), lost, self.clock() - started))
        except Exception as exc:
            self.post_message(
                PollFailed(f"{type(exc).__name__}: {exc}", False, self.clock() - started)
            )
        else:
            self.post_message(SnapshotLoaded(snapshot, flt, started, self.clock() - started))

    def on_snapshot_loaded(self, message: SnapshotLoaded) -> None:
        self.polling = False
        if not self.is_running:
            return  # the console closed while this poll ran: nothing to show, nothing to arm
        if message.filter != self.filter:
            self.poll_now()  # the filter changed while this poll ran: its rows are stale
            return
        self.snapshot = message.snapshot
        self.db_clock = DbClock.of(message.snapshot, message.started)
        self.last_ok = message.started + message.took
        self.took = message.took
        self.connected = True
        self.error = None
        self.failures = 0
        self.polls += 1
        listed = {j.id for j in (*self.snapshot.pending, *self.snapshot.processing)}
        listed |= {j.id for j in (*self.snapshot.stuck, *self.snapshot.failed)}
        self.selected &= listed
        self._redraw(full=True)
        self._arm(self.schedule.succeeded())

    def on_poll_failed(self, message: PollFailed) -> None:
        self.polling = False
        if not self.is_running:
            return
        self.failures += 1
        if message.lost:
            self.connected = False
        self.error = message.error
        self.polls += 1
        self._arm(self.schedule.failed())
        self._redraw(full=False)

    # -- privileges -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="privileges")
    def _check_privileges(self) -> None:
        try:
            can = self.source.can_update()
        except Exception:
            return  # unknown: the database refuses an unprivileged action anyway
        self.post_message(PrivilegeChecked(can))

    def on_privilege_checked(self, message: PrivilegeChecked) -> None:
        self.privileges_checked = True
        if not self.is_running:
            return
        if not message.can_update and self.read_only is None:
            self.read_only = "the database role may not EXECUTE the operator's actions"
            self.notify(
                f"Read-only: {self.read_only}. Actions are disabled.",
                title="Read-only console",
                severity="warning",
                timeout=10,
            )
        self.main.refresh_bindings()
        self._redraw(full=False)

    # -- navigation -------------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def open_detail(self, job_id: int) -> None:
        self.push_screen(
            DetailScreen(job_id, self.source.inspect, self.request_action, self.request_pause)
        )

    def open_filter(self) -> None:
        """The dialog lists every queue with live jobs and knows every owner, not only those
        the current filter shows."""
        snap = self.snapshot
        queues = view.known_queues(snap)
        owners = {o.owner for o in snap.owners} if snap else set()
        if snap is not None:
            queues.update(snap.queues)
            owners.update(snap.all_owners)
        self.push_screen(FilterScreen(self.filter, queues, owners), callback=self._filter_chosen)

    def open_find(self) -> None:
        self.push_screen(
            FindScreen(
                self.source.find,
                self.open_detail,
                self.find_text,
                act=self.request_action,
                bulk=self.source,
                read_only=lambda: self.read_only,
                pause=self.request_pause,
                limit=self.request_limit,
            ),
            callback=self._find_closed,
        )

    def _find_closed(self, text: str | None) -> None:
        self.find_text = text or ""

    def _filter_chosen(self, flt: ConsoleFilter | None) -> None:
        if flt is not None:
            self.apply_filter(flt)

    def apply_filter(self, flt: ConsoleFilter) -> None:
        if flt == self.filter:
            return
        self.filter = flt
        self.selected.clear()
        shown = f"filter: {visible(str(flt))}" if not flt.empty else "filter cleared"
        self.notify(shown, timeout=3)
        self.poll_now()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        main = self.main
        yield SystemCommand("Refresh now", "Poll the database now", self.poll_now)
        yield SystemCommand(
            "Filter…", "Narrow to a queue, an owner or a job id", main.action_filter
        )
        if not self.filter.empty:
            yield SystemCommand(
                "Clear filter", "Show all queues", lambda: self.apply_filter(ConsoleFilter())
            )
        yield SystemCommand(
            "Find…",
            "Find jobs as leasectl list does (state:, queue:, error:, since:…)",
            main.action_find,
        )
        yield SystemCommand("Help", "Keys and markers", self.action_help)
        if self.read_only is None:
            for a in OPERATOR_ACTIONS.values():  # (the statuses each applies to: core/actions.py)
                yield SystemCommand(
                    a.verb,
                    f"{a.verb} the selected or highlighted jobs ({named(a.applies_to)})",
                    functools.partial(main.action_act, a.name),
                )
            yield SystemCommand(
                "Requeue all expired",
                "Requeue every expired lease in the current filter",
                main.action_requeue_expired,
            )
            yield SystemCommand(
                "Pause or resume queue",
                "Pause the highlighted job's queue, or resume it if paused",
                main.action_toggle_pause,
            )
            yield SystemCommand(
                "Limit queue…",
                "Set or lift the highlighted job's queue's concurrency and rate limits",
                main.action_limit,
            )

    # -- actions ----------------------------------------------------------------------------

    def refuse(self, what: str) -> None:
        self.notify(
            f"Refused: {what} is disabled, the console is read-only ({self.read_only}).",
            title="Read-only",
            severity="error",
            timeout=6,
        )

    def request_action(self, action: Action, jobs: list[PanelJob]) -> None:
        """Confirm, then run, a guarded action on jobs exactly as the operator saw them."""
        what = action.verb.lower() if action is not Action.REQUEUE_EXPIRED else "requeue"
        if self.read_only is not None:
            self.refuse(what)
            return
        if self.acting:
            self.notify("An action is still running; wait for its result.", severity="warning")
            return
        now = self.db_now()
        if not jobs or now is None or self.snapshot is None:
            hint = (
                "no expired lease in the current filter"
                if action is Action.REQUEUE_EXPIRED
                else "highlight a job, or select some with space"
            )
            self.notify(f"Nothing to {what}: {hint}.", timeout=4)
            return
        note = None
        # What the whole filter matches (queue, owner, job), not the queue's count: the rows
        # loaded are the filter's.
        matching = self.snapshot.matching.expired
        if action is Action.REQUEUE_EXPIRED and matching > len(jobs):
            note = (
                f"{matching - len(jobs)} more expired leases in the filter are beyond the "
                f"{self.snapshot.limit} rows loaded; press R again afterwards for the rest."
            )
        seen = [j.seen() for j in jobs]
        screen = ConfirmScreen(action, jobs, now, view.owners_by_id(self.snapshot), note=note)
        self.push_screen(
            screen, callback=lambda reason: self._confirmed(action, seen, reason, screen.settings)
        )

    def _confirmed(
        self, action: Action, seen: list[SeenState], reason: str | None, settings: JobSettings
    ) -> None:
        if reason is None:
            return
        if self.read_only is not None:
            self.refuse(action.verb.lower())
            return
        self.acting = True
        self._act(action, seen, reason, settings)

    @work(thread=True, exclusive=True, exit_on_error=False, group="action")
    def _act(
        self, action: Action, seen: list[SeenState], reason: str, settings: JobSettings
    ) -> None:
        try:
            result = self.source.act(action.operator, seen, reason, settings)
        except LeasectlError as exc:
            self.post_message(ActionFailed(action, str(exc)))
        except Exception as exc:
            self.post_message(ActionFailed(action, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(ActionFinished(action, result))

    def on_action_finished(self, message: ActionFinished) -> None:
        self.acting = False
        self.last_result = message.result
        self.selected -= {*message.result.changed, *(s.id for s in message.result.skipped)}
        text = view.result_text(message.action, message.result)
        self.notify(text.body, title=text.title, severity=text.severity, timeout=15)
        self.poll_now()

    def on_action_failed(self, message: ActionFailed) -> None:
        self.acting = False
        self.last_error = message.error
        self.notify(
            f"{message.error}. Refresh (ctrl+r) to see the current state.",
            title=f"{message.action.verb} failed",
            severity="error",
            timeout=15,
        )

    # -- paused queues ----------------------------------------------------------------------

    def request_pause(self, queue: str | None) -> None:
        """Confirm, then pause ``queue``, or resume it if the last poll saw it paused. A pause
        or resume that finds the queue otherwise by then changes nothing and says so."""
        if self.read_only is not None:
            self.refuse("pause or resume")
            return
        if self.acting:
            self.notify("An action is still running; wait for its result.", severity="warning")
            return
        now = self.db_now()
        if queue is None or now is None or self.snapshot is None:
            self.notify("Nothing to pause or resume: highlight a job of the queue.", timeout=4)
            return
        pause = next((p for p in self.snapshot.paused if p.queue == queue), None)
        self.push_screen(
            QueueConfirmScreen(queue, pause, now),
            callback=lambda reason: self._pause_confirmed(queue, pause is not None, reason),
        )

    def _pause_confirmed(self, queue: str, resume: bool, reason: str | None) -> None:
        if reason is None:
            return
        if self.read_only is not None:
            self.refuse("pause or resume")
            return
        self.acting = True
        self._toggle_pause(queue, resume, reason)

    @work(thread=True, exclusive=True, exit_on_error=False, group="action")
    def _toggle_pause(self, queue: str, resume: bool, reason: str) -> None:
        try:
            if resume:
                ended = self.source.resume(queue, reason or None)
                message: QueueToggled = QueueToggled(queue, True, ended, ended is not None)
            else:
                pause, made = self.source.pause(queue, reason)
                message = QueueToggled(queue, False, pause, made)
        except LeasectlError as exc:
            self.post_message(QueueToggleFailed(queue, resume, str(exc)))
        except Exception as exc:
            self.post_message(QueueToggleFailed(queue, resume, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(message)

    def on_queue_toggled(self, message: QueueToggled) -> None:
        self.acting = False
        name = visible(message.queue)
        pause = message.pause
        if message.resumed:
            if pause is None:
                title, body = "Not paused", f"Queue {name} was not paused: nothing changed."
            else:
                title = "Queue resumed"
                body = f"Resumed queue {name}: its workers claim its jobs again."
        elif message.changed:
            title = "Queue paused"
            body = f"Paused queue {name}: no worker claims its jobs until it is resumed (P)."
        else:
            title = "Already paused"
            body = f"Queue {name} was already paused: that pause stands."
        if pause is not None and not (message.changed and not message.resumed):
            body += f" (paused by {visible(pause.paused_by)}: {visible(pause.reason)})"
        severity: SeverityLevel = "information" if message.changed else "warning"
        self.notify(body, title=title, severity=severity, timeout=10)
        self.poll_now()

    def on_queue_toggle_failed(self, message: QueueToggleFailed) -> None:
        self.acting = False
        self.last_error = message.error
        self.notify(
            f"{message.error}. Refresh (ctrl+r) to see the current state.",
            title=f"{'Resume' if message.resumed else 'Pause'} failed",
            severity="error",
            timeout=15,
        )
