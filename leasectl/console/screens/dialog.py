"""What every confirmation of an action that changes jobs or queues shares: the reason box has
the focus, and only a deliberate key confirms (docs/design.md, "Console keys").

Enter in the reason box never confirms: a person typing a filter on the screen below, whose
keys land here once a letter opened the dialog, ends the line with Enter. ctrl+y (or the
button, reached with tab or a click) confirms; esc goes back.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

CONFIRM_KEY = "ctrl+y"
CONFIRM_HINT = "ctrl+y confirms · esc back"
ENTER_HINT = "Enter does not confirm: ctrl+y does (or tab to the button)."


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

    @on(Input.Submitted, "#reason")
    def _entered(self, event: Input.Submitted) -> None:
        event.stop()
        self._error(ENTER_HINT, "yellow")

    @on(Button.Pressed, "#confirm-ok")
    def action_confirm(self) -> None:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason and self.reason_required:
            self._error("A reason is required: it goes to the audit log.")
            self.query_one("#reason", Input).focus()
            return
        self.dismiss(reason)

    @on(Button.Pressed, "#confirm-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
