"""docs/handlers.md names every public attribute of what a handler gets: a newcomer never has to
read runtime/worker.py to find `ctx.job.id`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import leasectl
from leasectl.core.models import Job, Lease

DOC = Path(__file__).resolve().parents[2] / "docs" / "handlers.md"


def _public(cls: type) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    return names


@pytest.mark.parametrize(
    "cls",
    [leasectl.JobContext, leasectl.AsyncJobContext, Job, Lease],
    ids=lambda cls: cls.__name__,
)
def test_every_public_attribute_is_named_in_the_doc(cls: type) -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(
        name
        for name in _public(cls) - {"from_row", "seen", "claim_order"}  # Job's, not a handler's
        if f"`{name}`" not in text and f"`{name}()`" not in text
    )
    assert missing == []


def test_the_context_attributes_are_in_their_tables() -> None:
    text = DOC.read_text(encoding="utf-8")
    sync = text.split("## `JobContext`", 1)[1].split("\n## ", 1)[0]
    for name in _public(leasectl.JobContext):
        assert f"| `{name}` |" in sync or f"| `{name}()` |" in sync, name


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
