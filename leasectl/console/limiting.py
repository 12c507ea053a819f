"""`L`: set or lift the limits of the highlighted job's queue, from the main screen and the find
screen: the dialog (screens/limit.py), then the audited call on the actions' connection, then
the result as a notification and a refresh. ``ConsoleApp`` has these methods (a base of it)."""

from __future__ import annotations

from textual import work
from textual.notifications import SeverityLevel

from leasectl.console.keys import KeyedApp
from leasectl.console.messages import QueueLimited, QueueLimitFailed
from leasectl.console.screens.limit import LimitRequest, LimitScreen
from leasectl.console.source import ConsoleSource
from leasectl.core.errors import LeasectlError
from leasectl.core.literal import visible
from leasectl.core.models import Snapshot
from leasectl.present.limits import limit_terms


class LimitActions(KeyedApp):
    # The app's state these methods share (ConsoleApp sets them).
    source: ConsoleSource
    snapshot: Snapshot | None
    read_only: str | None
    acting: bool
    last_error: str | None

    def refuse(self, what: str) -> None:
        raise NotImplementedError

    def poll_now(self) -> None:
        raise NotImplementedError

    def request_limit(self, queue: str | None) -> None:
        """Open the dialog that sets or lifts ``queue``'s limits (as the last poll saw them)."""
        if self.read_only is not None:
            self.refuse("limit")
            return
        if self.acting:
            self.notify("An action is still running; wait for its result.", severity="warning")
            return
        if queue is None or self.snapshot is None:
            self.notify("Nothing to limit: highlight a job of the queue.", timeout=4)
            return
        snap = self.snapshot
        current = next((lim for lim in snap.limits if lim.queue == queue), None)
        dialog = LimitScreen(queue, current, unread=snap.limits_total > len(snap.limits))
        self.push_screen(
            dialog, callback=lambda reason: self._limit_confirmed(queue, dialog.request, reason)
        )

    def _limit_confirmed(
        self, queue: str, request: LimitRequest | None, reason: str | None
    ) -> None:
        if reason is None or request is None:
            return
        if self.read_only is not None:
            self.refuse("limit")
            return
        self.acting = True
        self._apply_limit(queue, request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="action")
    def _apply_limit(self, queue: str, request: LimitRequest) -> None:
        try:
            if request.spec is None:
                ended = self.source.clear_limit(queue, request.reason)
                message = QueueLimited(queue, True, ended)
            else:
                now = self.source.set_limit(queue, request.spec, request.reason)
                message = QueueLimited(queue, False, now)
        except LeasectlError as exc:
            self.post_message(QueueLimitFailed(queue, str(exc)))
        except Exception as exc:
            self.post_message(QueueLimitFailed(queue, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(message)

    def on_queue_limited(self, message: QueueLimited) -> None:
        self.acting = False
        name = visible(message.queue)
        severity: SeverityLevel = "information"
        if message.limit is None:
            title, body = "Not limited", f"Queue {name} had no limits: nothing changed."
            severity = "warning"
        elif message.cleared:
            title = "Limits lifted"
            body = f"Lifted the limits of queue {name} (were {limit_terms(message.limit)})."
        else:
            title = "Queue limited"
            body = f"Limited queue {name}: {limit_terms(message.limit)}; its workers are told."
        self.notify(body, title=title, severity=severity, timeout=10)
        self.poll_now()

    def on_queue_limit_failed(self, message: QueueLimitFailed) -> None:
        self.acting = False
        self.last_error = message.error
        self.notify(
            f"{message.error}. Refresh (ctrl+r) to see the current state.",
            title="Limit failed",
            severity="error",
            timeout=15,
        )
