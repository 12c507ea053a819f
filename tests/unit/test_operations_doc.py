"""docs/operations.md names only what exists: every `leasectl COMMAND --option` in it is a
command of the CLI with that option (or a global one), every metric is the exporter's, every
alert is in contrib/prometheus/alerts.yml, and the storage settings it quotes are migration
23's. README and docs/architecture.md link to it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from leasectl import cli
from leasectl.db import sql as queries
from leasectl.runtime.exporter import METRICS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
ALERTS = ROOT / "contrib" / "prometheus" / "alerts.yml"


def _commands() -> tuple[dict[str, set[str]], set[str]]:
    group = typer.main.get_command(cli.app)
    options = {
        name: {o for p in command.params for o in getattr(p, "opts", ()) if o.startswith("-")}
        for name, command in group.commands.items()  # type: ignore[attr-defined]
    }
    root = {o for p in group.params for o in getattr(p, "opts", ()) if o.startswith("-")}
    return options, root | {"--help"}


def invocations(text: str) -> list[list[str]]:
    """Every `leasectl ...` of the doc: the lines of its code blocks and its inline code, cut
    at a comment, a pipe, `&`, `;` or a line continuation."""
    found = []
    pieces = re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)
    lines = [line for block in pieces for line in block.replace("\\\n", " ").splitlines()]
    lines += re.findall(
        r"`([^`\n]*leasectl [^`\n]*)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    )
    for line in lines:
        for m in re.finditer(r"(?:^|[\s/=\"'])leasectl ((?:[^#|&;\\\n]|\\.)*)", line):
            try:
                words = shlex.split(m.group(1).replace("$$", "PID"))
            except ValueError:
                words = m.group(1).split()
            if words:
                found.append(words)
    return found


def test_every_command_and_option_exists() -> None:
    options, root = _commands()
    seen = invocations(DOC.read_text(encoding="utf-8"))
    assert len(seen) >= 10, seen
    for words in seen:
        i = 0
        while i < len(words) and words[i].startswith("-"):  # global options before the command
            assert words[i].split("=")[0] in root, words
            i += 1 + (words[i] in {"--dsn", "--schema"})
        if i == len(words):
            continue
        command = words[i]
        assert command in options, f"no command {command!r}: {words}"
        for word in words[i + 1 :]:
            if word.startswith("--"):
                assert word.split("=")[0] in options[command] | root, f"{command} {word}"


def test_the_metrics_and_alerts_it_names_exist() -> None:
    text = DOC.read_text(encoding="utf-8")
    metrics = set(re.findall(r"\bleasectl_[a-z_]+[a-z]\b", text)) - {"leasectl_t"}
    assert metrics, "operations.md names no metric"
    assert metrics <= set(METRICS), metrics - set(METRICS)
    alerts = set(re.findall(r"`(Leasectl[A-Za-z]+)`", text))
    shipped = set(re.findall(r"- alert: (\w+)", ALERTS.read_text(encoding="utf-8")))
    assert alerts == shipped, (alerts, shipped)


def test_the_storage_settings_it_quotes_are_migration_23s() -> None:
    text = DOC.read_text(encoding="utf-8")
    migration = next(m for m in queries.migrations() if m.version == 23).text
    quoted = re.findall(r"`((?:autovacuum|vacuum|fillfactor)[a-z_]* = [0-9a-z.]+)`", text)
    assert quoted
    for setting in quoted:
        assert setting in migration or setting.startswith("autovacuum_naptime"), setting


def test_it_is_linked_from_readme_and_architecture() -> None:
    for doc in (ROOT / "README.md", ROOT / "docs" / "architecture.md"):
        assert "operations.md" in doc.read_text(encoding="utf-8"), doc
