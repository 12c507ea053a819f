"""Typer (0.29) coerces every parameter's value through a pydantic TypeAdapter it builds first,
missing values and plain strings too: importing pydantic and building the adapters was a
quarter of `leasectl status`'s start-up (bench/cli_start.py). The values whose coercion is the
identity skip it here; any other goes through Typer's own. Imported once, by ``cli/root.py``.
"""

from __future__ import annotations

from typing import Any

import typer.core

_Parameter: Any = getattr(typer.core, "_TyperParameter", None)
_process_value = getattr(_Parameter, "process_value", None)


class _Identity:
    """What Typer's coercion gives for a value that needs none: a missing value is ``()`` for a
    parameter that takes several, else None; any other value is itself."""

    @staticmethod
    def coerce(value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        return value


_IDENTITY = _Identity()


def _needs_no_coercion(param: Any, value: Any) -> bool:
    """A missing value, a string for a ``str`` parameter, or an ``int`` default within its
    bounds for an ``int`` one (what the command line gives is always a string)."""
    if value is None:
        return True
    if param.multiple or param.nargs != 1:
        return False
    descriptor = param.type_descriptor
    info = descriptor.parameter_info
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return False
    if descriptor.annotation is str:
        return type(value) is str
    if descriptor.annotation is int and type(value) is int:
        return (info.min is None or value >= info.min) and (info.max is None or value <= info.max)
    return False


def _process_without_adapter(self: Any, ctx: Any, value: Any) -> Any:
    assert _process_value is not None
    if getattr(self, "_runtime_param", False) is None and _needs_no_coercion(self, value):
        self._runtime_param = _IDENTITY
        try:
            return _process_value(self, ctx, value)
        finally:
            self._runtime_param = None  # built by Typer if another value ever needs it
    return _process_value(self, ctx, value)


# (A Typer without this coercion has nothing to mend.)
if _process_value is not None and hasattr(_Parameter, "get_runtime_param"):
    _Parameter.process_value = _process_without_adapter
