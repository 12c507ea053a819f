"""`/`: narrow the console to a queue, an owner or one job."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from leasectl.console.view import ConsoleFilter, FilterError, parse_filter
from leasectl.console.widgets import LiteralInput
from leasectl.core.literal import visible
from leasectl.present.text import lit

HINT = (
    "queue:NAME  owner:PREFIX  id:N (or #N, or N) — a bare word is a known queue, else an owner "
    "prefix. Empty clears. Counts follow the queue; owner and id narrow the panels."
)


class FilterScreen(ModalScreen[ConsoleFilter | None]):
    """Dismisses with the new filter, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, current: ConsoleFilter, queues: Iterable[str], owners: Iterable[str]
    ) -> None:
        super().__init__()
        self.current = current
        self.queues = sorted(queues)
        self.owners = sorted(owners)

    def compose(self) -> ComposeResult:
        with Vertical(id="filter-dialog"):
            yield Label(Text("Filter", style="bold"))
            # Shown escaped (LiteralInput): submitted unchanged, it keeps the current filter.
            yield LiteralInput(
                value=str(self.current), placeholder="queue:payments", id="filter-input"
            )
            yield Static("", id="filter-error")
            yield Static(Text(HINT, style="dim"), id="filter-hint")
            if self.queues:
                # Every queue with live jobs, whatever the current filter shows; a long list
                # scrolls, the input stays in sight.
                with VerticalScroll(id="filter-queues"):
                    yield Static(lit("queues: " + ", ".join(self.queues), "dim"))

    def on_mount(self) -> None:
        self.query_one("#filter-input", Input).focus()

    @on(Input.Submitted, "#filter-input")
    def _submit(self, event: Input.Submitted) -> None:
        if event.value == visible(str(self.current)):
            self.dismiss(self.current)
            return
        try:
            flt = parse_filter(event.value, self.queues, self.owners)
        except FilterError as exc:
            self.query_one("#filter-error", Static).update(lit(str(exc), "red"))
            return
        self.dismiss(flt)

    def action_cancel(self) -> None:
        self.dismiss(None)
