"""What every confirmation of an action that changes jobs or queues shares: the reason box has
the focus, and only a deliberate key confirms (docs/design.md, "Console keys").

Enter in the reason box never confirms: a person typing a filter on the screen below, whose
keys land here once a letter opened the dialog, ends the line with Enter. ctrl+y (or the
button, reached with tab or a click) confirms; esc goes back.

An action that takes settings (``ActionInfo.settings``: requeue) has two optional fields after
the reason, a new priority and N more attempts, checked as `leasectl requeue --priority N
--attempts N` checks them: a bad value is said in the dialog, which stays open; Enter in them
never confirms either.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from leasectl.console.widgets import LiteralInput
from leasectl.core.actions import NO_SETTINGS, JobSettings, parse_settings
from leasectl.core.errors import UsageError

CONFIRM_KEY = "ctrl+y"
CONFIRM_HINT = "ctrl+y confirms · esc back"
ENTER_HINT = "Enter does not confirm: ctrl+y does (or tab to the button)."
SETTING_FIELDS = ("priority", "attempts")


def settings_fields() -> ComposeResult:
    """The two optional fields of an action that takes settings (in a dialog's compose)."""
    labels = {
        "priority": ("New priority (optional)", "e.g. -10: smaller runs first"),
        "attempts": ("More attempts (optional)", "1 to 1000 (empty: 1 if spent)"),
    }
    with Horizontal(id="settings-fields"):
        for name in SETTING_FIELDS:
            label, hint = labels[name]
            with Vertical(classes="limit-field"):
                yield Label(label)
                yield LiteralInput(placeholder=hint, id=name)


class ReasonDialog(ModalScreen[str | None]):
    """Dismisses with the reason typed ("" when optional and none), or None when cancelled.
    A subclass composes ``#reason`` (an Input), ``#confirm-error``, ``#confirm-ok`` and
    ``#confirm-cancel``."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Back"),
        # priority: the Input in focus must not see it first
        Binding(CONFIRM_KEY, "confirm", "Confirm", priority=True),
    ]
    reason_required = True
    # True: the dialog composes settings_fields(); ``settings`` holds them once confirmed.
    takes_settings = False
    settings: JobSettings = NO_SETTINGS
    # Textual focuses it when the dialog is shown; an on_mount query would raise when a fast
    # key dismissed the dialog before it was mounted (seen on a loaded machine).
    AUTO_FOCUS = "#reason"

    @property
    def layers(self) -> tuple[str, ...]:
        """Notifications under the dialog, not over its buttons (at 80x24 the dialog fills the
        screen and a toast would hide the buttons for its whole timeout)."""
        rest = tuple(layer for layer in super().layers if layer != "_toastrack")
        return ("_toastrack", *rest)

    def hint(self) -> Static:
        return Static(Text(CONFIRM_HINT, style="dim"), id="confirm-hint")

    def _error(self, text: str, style: str = "red") -> None:
        self.query_one("#confirm-error", Static).update(Text(text, style=style))

    @on(Input.Submitted, "#reason, #priority, #attempts")
    def _entered(self, event: Input.Submitted) -> None:
        event.stop()
        self._error(ENTER_HINT, "yellow")

    @on(Button.Pressed, "#confirm-ok")
    def action_confirm(self) -> None:
        if self.takes_settings:
            values = [self.query_one(f"#{n}", Input).value.strip() for n in SETTING_FIELDS]
            try:
                self.settings = parse_settings(*(v or None for v in values))
            except UsageError as exc:
                said = str(exc).removeprefix("--")
                self._error(said[:1].upper() + said[1:])
                return
        reason = self.query_one("#reason", Input).value.strip()
        if not reason and self.reason_required:
            self._error("A reason is required: it goes to the audit log.")
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#confirm-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
