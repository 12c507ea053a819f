"""When a letter may quit the console (docs/design.md, "Console keys").

`q` is a letter, and people type: a `q` that follows another printable key within a typing gap,
or one pressed on any screen but the main one, only asks; a second `q` soon after quits.
ctrl+c and ctrl+q quit at once from anywhere (no one types them by accident in a filter).
"""

from __future__ import annotations

TYPING_GAP = 1.0  # seconds: a printable key this soon after another one is typing
ASK_WINDOW = 3.0  # seconds: a second `q` within this of the question quits


class QuitGuard:
    """Fed every key as it arrives (monotonic seconds); says whether a `q` quits now."""

    def __init__(self) -> None:
        self.last_printable: float | None = None
        self.q_typed = False  # the last `q` came within a typing gap of the key before it
        self.asked_at: float | None = None

    def saw(self, key: str, printable: bool, at: float) -> None:
        if key == "q":
            last = self.last_printable
            self.q_typed = last is not None and at - last < TYPING_GAP
        if printable:
            self.last_printable = at

    def quits(self, at: float, *, on_main: bool) -> bool:
        """Whether the `q` last seen quits; if not, the caller asks, and the next `q` within
        ``ASK_WINDOW`` quits."""
        if self.asked_at is not None and at - self.asked_at <= ASK_WINDOW:
            return True
        if on_main and not self.q_typed:
            return True
        self.asked_at = at
        return False
