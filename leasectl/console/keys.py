"""How the console quits, and when a letter may quit it (docs/design.md, "Console keys").

`q` is a letter, and people type: a `q` that follows another printable key within a typing gap,
or one pressed on any screen but the main one, only asks; a second `q` soon after quits.
ctrl+c and ctrl+q quit at once from anywhere (no one types them by accident in a filter).
"""

from __future__ import annotations

import time
from typing import ClassVar

from textual import events, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.css.query import NoMatches

TYPING_GAP = 1.0  # seconds: a printable key this soon after another one is typing
ASK_WINDOW = 3.0  # seconds: a second `q` within this of the question quits


class QuitGuard:
    """Fed every key as it arrives (monotonic seconds); says whether a `q` quits now."""

    def __init__(self) -> None:
        self.last_printable: float | None = None
        self.q_typed = False  # the last `q` came within a typing gap of the key before it
        self.asked_at: float | None = None
        self.ask_window = ASK_WINDOW
        self.typing_gap = TYPING_GAP

    def saw(self, key: str, printable: bool, at: float) -> None:
        if key == "q":
            last = self.last_printable
            self.q_typed = last is not None and at - last < self.typing_gap
        if printable:
            self.last_printable = at

    def quits(self, at: float, *, on_main: bool) -> bool:
        """Whether the `q` last seen quits; if not, the caller asks, and the next `q` within
        ``ASK_WINDOW`` quits."""
        if self.asked_at is not None and at - self.asked_at <= self.ask_window:
            return True
        if on_main and not self.q_typed:
            return True
        self.asked_at = at
        return False


class KeyedApp(App[None]):
    """The console's app as far as quitting goes: ctrl+c quits, `q` asks when it may be
    typing, and once quitting, no key is handled (`q:` typed quickly opened the command
    palette as the app closed: a traceback)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # priority: before a text box's own ctrl+c (copy)
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("q", "ask_quit", "Quit", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.quit_guard = QuitGuard()
        self.quitting = False

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            if self.quitting:
                return  # keys typed after the quit must not open screens as it closes
            self.quit_guard.saw(event.key, event.is_printable, time.monotonic())
        await super().on_event(event)

    async def action_quit(self) -> None:
        self.quitting = True
        self.exit()

    def action_help_quit(self) -> None:
        """Textual's ctrl+c only tells how to quit (its markup shown as text, every
        notification here being plain): here ctrl+c quits."""
        self.quitting = True
        self.exit()

    async def action_ask_quit(self) -> None:
        if self.quit_guard.quits(time.monotonic(), on_main=len(self.screen_stack) == 1):
            await self.action_quit()
            return
        self.notify("Quit the console? Press q again, or ctrl+c.", title="Quit?", timeout=3)

    def action_command_palette(self) -> None:
        open_ = any(isinstance(screen, CommandPalette) for screen in self.screen_stack)
        if self.use_command_palette and not self.quitting and not open_:
            self.push_screen(Palette(id="--command-palette"))


class Palette(CommandPalette):
    """Textual's palette, except that closed while it gathers its first commands (the app
    quitting as it opens) it ends quietly instead of failing on its removed list."""

    @work(exclusive=True, group=CommandPalette._GATHER_COMMANDS_GROUP)
    async def _gather_commands(self, search_value: str) -> None:
        gather = CommandPalette._gather_commands.__wrapped__  # type: ignore[attr-defined]
        try:
            await gather(self, search_value)
        except NoMatches:
            if self.app.screen is self and not getattr(self.app, "quitting", False):
                raise
