"""The guarded operator actions as commands: on job ids, or on every job a filter matches
(`leasectl requeue --state failed --queue payments --since 1h`), in batches.

``guarded_command(action)`` makes the command of any operator action (``core/actions.py``):
the id form (one guarded statement) and the filter form (``runtime.bulk.run``), the filter's
options being the ones of `leasectl list` (``FilterOpts``, parsed by ``filters.parse_filter``).
"""

from __future__ import annotations

import inspect
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Annotated, Any

import typer

from leasectl.cli.completion import complete_queue, complete_state
from leasectl.cli.root import EXIT_INTERRUPTED, JsonOpt, _duration, _emit_json, _operations, _show
from leasectl.cli.stderr import _warn
from leasectl.core import bulk, config, filters, statuses
from leasectl.core.actions import (
    NO_SETTINGS,
    JobSettings,
    OperatorAction,
    action_info,
    check_settings,
    parse_settings,
)
from leasectl.core.errors import UsageError
from leasectl.core.models import ActionResult
from leasectl.core.statuses import FINISHED

# The presentation and the runtime (psycopg) are imported when an action runs, not when --help
# or a TAB imports this module (cli/commands.py).

# -- the filter's options, as `leasectl list` has them ---------------------------------------

StateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--state",
        "-s",
        metavar="STATE",
        help="Only jobs in this status (any case; repeat it or separate with commas).",
        show_default=False,
        autocompletion=complete_state,
    ),
]
FilterQueueOpt = Annotated[
    str | None,
    typer.Option(
        "--queue",
        "-q",
        metavar="QUEUE",
        help="Only this queue.",
        show_default=False,
        autocompletion=complete_queue,
    ),
]
OwnerOpt = Annotated[
    str | None,
    typer.Option(
        "--owner",
        metavar="OWNER",
        help="Only jobs whose current or last lease this worker id holds or held.",
        show_default=False,
    ),
]
ErrorOpt = Annotated[
    str | None,
    typer.Option(
        "--error",
        metavar="TEXT",
        help="Only jobs whose last error contains TEXT (any case; % and _ are literal).",
        show_default=False,
    ),
]
PayloadOpt = Annotated[
    str | None,
    typer.Option(
        "--payload",
        metavar="JSON",
        help="Only jobs whose payload contains this JSON (e.g. '{\"tenant\": 7}').",
        show_default=False,
    ),
]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        metavar="DURATION",
        help=f"Only jobs created (finished, when every --state is {statuses.named(FINISHED)}) "
        "at most this long ago, on the database clock.",
        show_default=False,
    ),
]
UntilOpt = Annotated[
    str | None,
    typer.Option(
        "--until",
        metavar="DURATION",
        help="Only jobs created (finished, as for --since) more than this long ago.",
        show_default=False,
    ),
]
AllOpt = Annotated[
    bool,
    typer.Option(
        "--all",
        help="No filter: every job the action applies to (an empty filter is never implied).",
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="With a filter: the count and the first jobs; change nothing."),
]
BatchOpt = Annotated[
    int,
    typer.Option(
        "--batch-size",
        min=1,
        max=bulk.MAX_BATCH,
        help="With a filter: jobs per batch (one guarded transaction each).",
    ),
]
AfterOpt = Annotated[
    str | None,
    typer.Option(
        "--after",
        metavar="ID",
        help="With a filter: only jobs with ids below this one (the resume_after of a run "
        "that was stopped).",
        show_default=False,
    ),
]
TimeoutOpt = Annotated[
    str,
    typer.Option(
        metavar="DURATION",
        help="With a filter: give up a read of the filter after this long (a filter no index "
        "serves scans the history).",
    ),
]
IdsArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="ID", help="Job ids (or give a filter).", show_default=False),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Also override a live lease (the holder loses the job).")
]
PriorityOpt = Annotated[
    str | None,
    typer.Option(
        "--priority",
        metavar="N",
        help="The jobs' new priority (smaller runs first; an integer of 32 bits). Audited.",
        show_default=False,
    ),
]
AttemptsOpt = Annotated[
    str | None,
    typer.Option(
        "--attempts",
        metavar="N",
        help="A fresh attempt budget, 1 to 1000: N more attempts from now (max_attempts := "
        "attempts + N, at most 1000; the attempt count never goes back). Default: one more "
        "when the budget is spent. Audited.",
        show_default=False,
    ),
]
ReasonOpt = Annotated[
    str | None,
    typer.Option(
        help="Audit reason, kept in job_events (with a filter, the filter is added to it).",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class FilterArgs:
    """The filter's options as typed, before parsing."""

    states: Sequence[str]
    queue: str | None
    owner: str | None
    error: str | None
    payload: str | None
    since: str | None
    until: str | None

    def given(self) -> bool:
        return bool(self.states) or any(
            v is not None
            for v in (self.queue, self.owner, self.error, self.payload, self.since, self.until)
        )

    def parse(self) -> filters.JobFilter:
        return filters.parse_filter(
            states=self.states,
            queue=self.queue,
            owner=self.owner,
            error=self.error,
            payload=self.payload,
            since=self.since,
            until=self.until,
        )


# -- the id form -----------------------------------------------------------------------------


def _report_skips(action: str, result: ActionResult) -> None:
    if not result.skipped:
        return
    from leasectl.present.skips import skip_reason

    verb = action_info(action).past
    _warn(
        f"{len(result.skipped)} of {len(result.skipped) + len(result.changed)} job(s) "
        f"not {verb}: "
        + "; ".join(f"{s.id}: {skip_reason(s)}" for s in result.skipped[:3])
        + (f"; and {len(result.skipped) - 3} more" if len(result.skipped) > 3 else "")
    )
    raise typer.Exit(1)


def on_ids(
    ctx: typer.Context,
    name: str,
    id_texts: Sequence[str],
    *,
    force: bool,
    reason: str | None,
    as_json: bool,
    settings: JobSettings = NO_SETTINGS,
) -> None:
    from leasectl.present.actions import action_renderables
    from leasectl.present.skips import action_json
    from leasectl.runtime import bulk as engine

    ids = [config.parse_job_id(text) for text in id_texts]
    act = engine.action(name)
    with _operations(ctx) as ops:
        seen = ops.seen_now(ids)
        result = act.run(
            ops, seen, actor=config.operator_actor(), reason=reason, force=force, settings=settings
        )
    if as_json:
        _emit_json(action_json(result))
    else:
        _show(action_renderables(result))
    _report_skips(name, result)


# -- the filter form -------------------------------------------------------------------------


class _Stop:
    """SIGINT/SIGTERM while a run goes: finish the batch in flight, then stop. A second signal
    acts as it would have (the batch in flight rolls back)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.event.set()
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def __exit__(self, *exc: object) -> None:
        self._restore()


def on_filter(
    ctx: typer.Context,
    name: str,
    flt: filters.JobFilter,
    *,
    everything: bool,
    dry_run: bool,
    batch_size: int,
    after_text: str | None,
    timeout_text: str,
    force: bool,
    reason: str | None,
    as_json: bool,
    settings: JobSettings = NO_SETTINGS,
) -> None:
    from leasectl.present.bulk import (
        plan_json,
        plan_renderables,
        progress_text,
        result_json,
        result_renderables,
        stopped_text,
    )
    from leasectl.present.skips import skip_reason
    from leasectl.runtime import bulk as engine

    bulk.check_filter(flt, everything=everything)
    act = engine.action(name)
    bulk.narrow(flt, name, act.eligible)  # a --state the action never applies to: exit 2 now
    after = filters.parse_after(after_text)
    wait = _duration(timeout_text, "--timeout")
    if wait > filters.MAX_TIMEOUT:
        raise typer.BadParameter("at most 10m", param_hint="'--timeout'")
    with _operations(ctx) as ops:
        if dry_run:
            plan = engine.plan(ops, act, flt, after=after, timeout=wait)
            if as_json:
                _emit_json(plan_json(plan))
            else:
                _show(plan_renderables(plan))
            return
        progress: Callable[[bulk.BulkProgress], None] | None = None
        if not as_json and sys.stderr.isatty():

            def progress(p: bulk.BulkProgress) -> None:
                print(progress_text(name, p).plain, file=sys.stderr, end="\r", flush=True)

        with _Stop() as stop:
            result = engine.run(
                ops,
                act,
                flt,
                actor=config.operator_actor(),
                reason=reason,
                force=force,
                settings=settings,
                batch_size=batch_size,
                after=after,
                timeout=wait,
                stop=stop.event,
                progress=progress,
            )
    if progress is not None:
        print(file=sys.stderr)
    if as_json:
        _emit_json(result_json(result))
    else:
        _show(result_renderables(result))
    if not result.complete:
        _warn(stopped_text(result))
        raise typer.Exit(EXIT_INTERRUPTED)
    if result.skipped:
        verb = action_info(name).past
        _warn(
            f"{len(result.skipped):,} of {result.matched:,} matching job(s) not {verb}: "
            + "; ".join(f"{s.id}: {skip_reason(s)}" for s in result.skipped[:3])
            + (f"; and {len(result.skipped) - 3:,} more" if len(result.skipped) > 3 else "")
        )
        raise typer.Exit(1)


# -- the command -----------------------------------------------------------------------------


def guarded_command(action: OperatorAction) -> Callable[..., None]:
    """The command of an operator action (its entry in ``core/actions.py``): on ids, or on a
    filter. Its help's first line is the entry's ``summary``; ``--reason`` is checked before
    anything is read (required when the entry says so); ``--force`` is refused where it means
    nothing (cancel revokes a live lease anyway, delete never touches one)."""
    entry = action_info(action)
    name, summary, forceable = entry.name, entry.summary, entry.forceable

    def reason_rule(text: str | None) -> str | None:
        return config.check_reason(text, required=entry.reason_required)

    def command(
        ctx: typer.Context,
        ids: IdsArg = None,
        state: StateOpt = None,
        queue: FilterQueueOpt = None,
        owner: OwnerOpt = None,
        error: ErrorOpt = None,
        payload: PayloadOpt = None,
        since: SinceOpt = None,
        until: UntilOpt = None,
        everything: AllOpt = False,
        dry_run: DryRunOpt = False,
        batch_size: BatchOpt = bulk.DEFAULT_BATCH,
        after: AfterOpt = None,
        timeout: TimeoutOpt = "5s",
        force: ForceOpt = False,
        reason: ReasonOpt = None,
        priority: PriorityOpt = None,
        attempts: AttemptsOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        if force and not forceable:
            raise UsageError(f"--force does not apply to {name}")
        settings = parse_settings(priority, attempts)  # a bad value: exit 2, nothing read
        check_settings(entry, settings)
        # A dry run changes nothing and so needs no reason; one given is still checked.
        if not (dry_run and reason is None):
            reason = reason_rule(reason)
        args = FilterArgs(state or (), queue, owner, error, payload, since, until)
        if ids:
            if args.given() or everything:
                raise UsageError("give job ids or a filter, not both")
            extra = [
                option
                for option, used in (
                    ("--dry-run", dry_run),
                    ("--after", after is not None),
                    ("--batch-size", batch_size != bulk.DEFAULT_BATCH),
                )
                if used
            ]
            if extra:
                raise UsageError(f"{', '.join(extra)}: only with a filter, not with job ids")
            on_ids(ctx, name, ids, force=force, reason=reason, as_json=as_json, settings=settings)
            return
        on_filter(
            ctx,
            name,
            args.parse(),
            everything=everything,
            dry_run=dry_run,
            batch_size=batch_size,
            after_text=after,
            timeout_text=timeout,
            force=force,
            reason=reason,
            as_json=as_json,
            settings=settings,
        )

    command.__doc__ = (
        f"{summary}\n\nOn job ids (one guarded statement), or on every job a filter matches "
        "(the options of `leasectl list`; an empty filter needs --all), in batches: each "
        "guarded and audited (the reason names the filter), committed one by one. Stopped "
        "(Ctrl-C), the same command continues. Exit 1 if any job is skipped, 130 if stopped."
    )
    command.__name__ = name.replace("-", "_")
    if not entry.settings:
        # --priority and --attempts are options of the actions that take settings only: Typer
        # reads the options from the signature, so the others' help never shows them.
        signature = inspect.signature(command, eval_str=True)
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[
                p for p in signature.parameters.values() if p.name not in ("priority", "attempts")
            ]
        )
    return command
