"""docs/handlers.md names every public attribute of what a handler gets: a newcomer never has to
read runtime/worker/ to find `ctx.job.id`. Each context class has a table in the doc, one row
per public member with its type; the test reads the members and their annotations from the code
and fails on a member without its row, a row without its member, or a type that differs.

A member added to a context (a field, a property, a method) fails
``test_each_class_table_matches_the_code`` until its row is in the class's table: `| \\`name\\`
| \\`type\\` | what it is |` for an attribute, `| \\`name()\\` | \\`(args) -> return\\` | … |` for a
method (the type as ``_shown`` writes it; the failure prints the rows it expected).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

import leasectl
from leasectl.core.models import Job, Lease
from leasectl.runtime.worker.context import CancelledEvent

DOC = Path(__file__).resolve().parents[2] / "docs" / "handlers.md"

# The classes with a table of their own: the heading its table follows.
TABLES: dict[type, str] = {
    leasectl.JobContext: "## `JobContext`",
    leasectl.AsyncJobContext: "## `AsyncJobContext`",
    CancelledEvent: "### `CancelledEvent`",
}
_ROW = re.compile(r"^\| `([a-z_]+(?:\(\))?)` \| `([^`]+)` \|", re.MULTILINE)


def _public(cls: type) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    return names


def _shown(hint: Any) -> str:
    """A type as the doc writes it: builtins and leasectl's classes by name, others with their
    module (``threading.Event``), ``Any``, generics with their arguments, ``X | None``."""
    if hint is Any:
        return "Any"
    if hint is None or hint is type(None):
        return "None"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_shown(arg) for arg in typing.get_args(hint))
    if origin is not None:
        return f"{_shown(origin)}[{', '.join(_shown(a) for a in typing.get_args(hint))}]"
    if isinstance(hint, type):
        module = hint.__module__
        if module == "builtins" or module.startswith("leasectl"):
            return hint.__qualname__
        return f"{module.split('.')[0]}.{hint.__qualname__}"
    return str(hint)


def _member_rows(cls: type) -> dict[str, str]:
    """What each public member's row must say: ``name`` or ``name()`` -> its type."""
    hints = typing.get_type_hints(cls)
    rows = {}
    for name in sorted(_public(cls)):
        member = inspect.getattr_static(cls, name, None)
        if isinstance(member, property):
            rows[name] = _shown(typing.get_type_hints(member.fget)["return"])
        elif inspect.isfunction(member):
            sig = inspect.signature(member)
            fn_hints = typing.get_type_hints(member)
            args = ", ".join(
                f"{p.name}: {_shown(fn_hints[p.name])}"
                for p in list(sig.parameters.values())[1:]  # (self)
            )
            prefix = "async " if inspect.iscoroutinefunction(member) else ""
            rows[f"{name}()"] = f"{prefix}({args}) -> {_shown(fn_hints['return'])}"
        else:
            rows[name] = _shown(hints[name])
    return rows


def _doc_rows(heading: str) -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n{heading}\n", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    table = section.split("| member | type | what it is |", 1)[1].split("\n\n", 1)[0]
    found = _ROW.findall(table)
    assert len(found) == len({name for name, _ in found}), f"a row twice under {heading}"
    return dict(found)


@pytest.mark.parametrize("cls", list(TABLES), ids=lambda cls: cls.__name__)
def test_each_class_table_matches_the_code(cls: type) -> None:
    expected, documented = _member_rows(cls), _doc_rows(TABLES[cls])
    missing = {n: t for n, t in expected.items() if n not in documented}
    assert not missing, "rows to add to docs/handlers.md: " + "; ".join(
        f"| `{n}` | `{t}` |" for n, t in missing.items()
    )
    assert set(documented) - set(expected) == set(), "rows for members the code does not have"
    assert {n: documented[n] for n in expected} == expected


def test_the_type_renderer_shows_what_the_doc_writes() -> None:
    assert _shown(bool) == "bool"
    assert _shown(Job) == "Job"
    assert _shown(Any) == "Any"
    assert _shown(int | None) == "int | None"
    assert _shown(typing.ContextManager[Any]) == "contextlib.AbstractContextManager[Any]"
    import threading

    assert _shown(threading.Event) == "threading.Event"


def test_a_member_without_its_row_fails_the_check() -> None:
    """The check can fail: a context with one more member has a row the doc lacks."""

    @dataclasses.dataclass
    class Grown(leasectl.JobContext):
        share: float = 0.0

        def defer(self, seconds: float) -> None:
            raise NotImplementedError

    expected = _member_rows(Grown)
    assert expected["share"] == "float"
    assert expected["defer()"] == "(seconds: float) -> None"
    assert set(expected) - set(_doc_rows(TABLES[leasectl.JobContext])) == {"share", "defer()"}


@pytest.mark.parametrize("cls", [Job, Lease], ids=lambda cls: cls.__name__)
def test_every_public_attribute_of_the_models_is_named_in_the_doc(cls: type) -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(
        name
        for name in _public(cls) - {"from_row", "seen", "claim_order"}  # Job's, not a handler's
        if f"`{name}`" not in text and f"`{name}()`" not in text
    )
    assert missing == []


def test_the_handler_names_are_what_leasectl_exports() -> None:
    for name in (
        "JobContext",
        "AsyncJobContext",
        "PermanentError",
        "LeaseLost",
        "Snooze",
        "JobTimedOut",
    ):
        assert name in leasectl.__all__
