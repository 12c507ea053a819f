"""The dialog of `L`: set or lift a queue's limits (a concurrency cap, a rate and its burst),
with a required reason, as `leasectl limit` does. Every value is checked here, before anything
is sent: a bad one is said in the dialog and changes nothing.

As every confirmation (dialog.py): the focus starts in a field of the dialog, Enter never
confirms, ctrl+y (or the button) does, esc goes back; keys typed meanwhile land in the fields,
never on a job of the screen below.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from leasectl.console import view
from leasectl.console.screens.dialog import ENTER_HINT, ReasonDialog
from leasectl.console.widgets import LiteralInput
from leasectl.core.config import check_reason
from leasectl.core.errors import UsageError
from leasectl.core.limits import (
    LimitSpec,
    QueueLimit,
    check_concurrency,
    check_spec,
    parse_rate,
    rate_text,
)
from leasectl.core.literal import echo
from leasectl.present.status import limit_brief
from leasectl.present.text import lit

FIELDS = ("concurrency", "rate", "burst")


@dataclass(frozen=True)
class LimitRequest:
    """What the dialog confirmed: the limits to set, or None to lift them; and why."""

    spec: LimitSpec | None
    reason: str


def parse_fields(concurrency: str, rate: str, burst: str) -> LimitSpec | None:
    """The dialog's three fields as a complete limit, or None when the cap and the rate are
    both empty (lift the limits). Raises UsageError, in the dialog's words, for a bad value."""
    c, r, b = (v.strip() for v in (concurrency, rate, burst))
    if not c and not r:
        if b:
            raise UsageError("a burst needs a rate: it is the rate's bucket size")
        return None
    try:
        spec = LimitSpec(
            check_concurrency(_whole(c, "concurrency")) if c else None,
            parse_rate(r) if r else None,
            _whole(b, "burst") if b else None,
        )
        return check_spec(spec)
    except UsageError as exc:  # the CLI's words name its options: here, the fields
        raise UsageError(str(exc).replace("--", "")) from None


def _whole(text: str, name: str) -> int:
    if not text.isdigit() or not text.isascii() or len(text) > 9:
        raise UsageError(f"invalid {name} {echo(text)}: a whole number (e.g. 10)")
    return int(text)


class LimitScreen(ReasonDialog):
    """Dismisses with the reason typed, or None when cancelled; ``request`` then holds what
    to do. ``limit``: the queue's limits as last polled (None: not limited, or ``unread``:
    the refresh read the first limited queues only, not this one's)."""

    AUTO_FOCUS = "#concurrency"

    def __init__(self, queue: str, limit: QueueLimit | None, *, unread: bool = False) -> None:
        super().__init__()
        self.queue = queue
        self.limit = limit
        self.unread = limit is None and unread
        self.request: LimitRequest | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            title = Text("Limit queue ", style="bold")
            title.append_text(lit(view.cut(self.queue, 60), "bold"))
            yield Static(title, id="confirm-title")
            with VerticalScroll(id="confirm-body"):
                yield Static(self._body(), id="confirm-condition")
            lim = self.limit
            rate = "" if lim is None or lim.rate is None else rate_text(lim.rate)
            values = {
                "concurrency": ""
                if lim is None or lim.concurrency is None
                else str(lim.concurrency),
                "rate": rate,
                "burst": "" if lim is None or lim.burst is None else str(lim.burst),
            }
            hints = {
                "concurrency": "e.g. 10 (empty: no cap)",
                "rate": "e.g. 20/s, 300/m",
                "burst": "default: 1 s worth",
            }
            with Horizontal(id="limit-fields"):
                for name in FIELDS:
                    with Vertical(classes="limit-field"):
                        yield Label(name.capitalize() if name != "rate" else "Rate (starts)")
                        yield LiteralInput(values[name], placeholder=hints[name], id=name)
            yield Label("Reason (required; recorded in queue_events with your name):")
            yield LiteralInput(placeholder="e.g. partner API rate limit, INC-1234", id="reason")
            yield Static("", id="confirm-error")
            with Horizontal(id="confirm-buttons"):
                yield self.hint()
                yield Button("Apply", variant="warning", id="confirm-ok")
                yield Button("Cancel", id="confirm-cancel")

    def _body(self) -> Text:
        text = Text()
        if self.unread:
            text.append("Its limits, if any, were not read (the console reads the first 100 ")
            text.append("limited queues; `leasectl limits` lists them all). ")
        elif self.limit is None:
            text.append("Not limited. ")
        else:
            text.append("Now: ")
            text.append_text(limit_brief(self.limit))
            text.append(f"; {self.limit.throttled:,} claims cut short. ", style="dim")
        text.append("Every worker keeps to these at once (PostgreSQL enforces them). ")
        text.append("Empty the cap and the rate to lift the limits.", style="dim")
        return text

    @on(Input.Submitted, "#concurrency, #rate, #burst")
    def _entered_in_a_field(self, event: Input.Submitted) -> None:
        event.stop()
        self._error(ENTER_HINT, "yellow")

    @on(Button.Pressed, "#confirm-ok")
    def action_confirm(self) -> None:
        if self.request is not None or not self.is_current:
            return  # confirmed already (a key of a burst, the dialog on its way out)
        fields = [self.query_one(f"#{name}", Input).value for name in FIELDS]
        try:
            spec = parse_fields(*fields)
            if spec is None and self.limit is None and not self.unread:
                raise UsageError(
                    "give a concurrency and/or a rate: the queue has no limits to lift"
                )
            reason = self.query_one("#reason", Input).value.strip()
            check_reason(reason, required="a reason is required: it goes to the audit log")
        except UsageError as exc:
            said = str(exc).removeprefix("--reason must not be empty: ").removeprefix("--")
            self._error(said[:1].upper() + said[1:])
            return
        self.request = LimitRequest(spec, reason)
        self.dismiss(reason)
