"""Typer (0.29) writes a type after every option in --help, flags too (``--json <bool>``), as if
they took a value: a flag's type column stays empty. Imported once, by ``cli/root.py``."""

from __future__ import annotations

from typing import Any

import typer.core

_shown_type = getattr(typer.core.TyperOption, "display_type_rich", None)


def _flag_shows_no_type(self: Any, ctx: Any) -> str | None:
    if self.is_flag and self.metavar is None:
        return None
    assert _shown_type is not None
    result: str | None = _shown_type(self, ctx)
    return result


if _shown_type is not None:  # (older Typers print no type for a flag: nothing to mend)
    typer.core.TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]
