"""docs/cli.md is the command line's own text: regenerated, never drifting from the code."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from leasectl import cli
from leasectl.cli import docgen


def test_cli_md_is_current() -> None:
    written = docgen.DOC.read_text(encoding="utf-8")
    assert written == docgen.render(), "docs/cli.md is stale: run python -m leasectl.cli.docgen"


def test_every_command_and_option_is_in_the_reference() -> None:
    text = docgen.render()
    group = typer.main.get_command(cli.app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for opt in getattr(param, "opts", ()):
                if opt.startswith("-"):
                    assert opt in section, (name, opt)
    # Those the hand-written tables had lost.
    for name, opt in [("status", "--read-dsn"), ("watch", "--reason"), ("demo", "--json")]:
        assert opt in text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]


def test_check_says_when_the_file_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n", encoding="utf-8")
    monkeypatch.setattr(docgen, "DOC", stale)
    assert docgen.main(["--check"]) == 1
    assert docgen.main([]) == 0
    assert docgen.main(["--check"]) == 0
