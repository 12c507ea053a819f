"""The commands, in the order `leasectl --help` lists them, each imported only when it is used.

A command's module (and what it imports: psycopg, Rich, the worker) is loaded the first time
the group looks the command up: `leasectl status` loads only `cli/jobs.py`, `--version` none.
`--help` and a TAB on a command name load them all, for their help lines; so the command
modules import their heavy layers inside the commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
import typer.core
import typer.main
from typer import _click  # Typer's vendored Click: a group holds its Commands
from typer.models import CommandInfo

# name: (module of leasectl.cli, function)
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("jobs", "init"),
    "enqueue": ("jobs", "enqueue"),
    "worker": ("worker", "worker"),
    "watch": ("actions", "watch"),
    "requeue-stuck": ("actions", "requeue_stuck"),
    "requeue": ("actions", "requeue"),
    "mark-stuck": ("actions", "mark_stuck"),
    "cancel": ("actions", "cancel"),
    "delete": ("actions", "delete"),
    "pause": ("queues", "pause"),
    "resume": ("queues", "resume"),
    "limit": ("limits", "limit"),
    "limits": ("limits", "limits"),
    "schedule": ("schedules", "app"),
    "inspect": ("jobs", "inspect"),
    "list": ("history", "list_jobs"),
    "status": ("jobs", "status"),
    "stats": ("stats", "stats"),
    "errors": ("incident", "errors"),
    "events": ("incident", "events"),
    "metrics": ("metrics", "metrics"),
    "prune": ("jobs", "prune"),
    "grant": ("admin", "grant"),
    "demo": ("console", "demo"),
    "tui": ("console", "tui"),
}


def callback(name: str) -> Any:
    """The function of the command ``name``, its module imported."""
    module, function = COMMANDS[name]
    return getattr(importlib.import_module(f"leasectl.cli.{module}"), function)


class _Commands(MutableMapping[str, _click.Command]):
    """The group's commands by name, in COMMANDS' order: each built from its function the first
    time it is looked up; iterating gives the names only."""

    def __init__(self, group: typer.core.TyperGroup) -> None:
        self._group = group
        self._names = list(COMMANDS)
        self._built: dict[str, _click.Command] = {}

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            found = callback(name)
            if isinstance(found, typer.Typer):  # a group of commands (`schedule add`, ...)
                group = typer.main.get_group(found)
                group.name = name
                self._built[name] = group
                return group
            info = CommandInfo(name=name, callback=found)
            self._built[name] = typer.main.get_command_from_info(
                info, pretty_exceptions_short=True, rich_markup_mode=self._group.rich_markup_mode
            )
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


class LazyGroup(typer.core.TyperGroup):
    """The root group (``typer.Typer(cls=LazyGroup)``): its commands are COMMANDS, built when
    looked up, then any registered on the app, built by Typer."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        given, self.commands = self.commands, _Commands(self)
        for name, command in given.items():  # any registered on the app itself (app.command())
            self.commands[name] = command

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)
