"""`leasectl demo`: a database, a fleet, a stream of jobs, some chaos, and the console on top.

Where it runs (the embedded server or a DSN, one demo at a time): target.py. One run, from the
fleet's start to the count at the end: session.py. The console in front: console.py; the
signals and the console's hang guard: signals.py; the summary: summary.py.

Timeline (defaults; C = chaos_every = 20s): jobs flow at once and some fail and retry; a
poison job fails twice and the scripted operator quarantines it (Stuck) within seconds; at
C/4 reports-1 is SIGSTOPped while it holds work (owner silent, leases lapse, the watcher
requeues, SIGCONT, its late results are fenced off); at C/2 payments-2 is SIGKILLed while it
holds work and restarted a second later; then again every C.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import TextIO

from leasectl.core import terminal
from leasectl.core.errors import UsageError
from leasectl.demo.console import ConsoleRunner, console_in_foreground, load_console
from leasectl.demo.fleet import FleetConfig
from leasectl.demo.session import Run
from leasectl.demo.signals import Signals, console_hang_guard
from leasectl.demo.summary import DemoSummary, Reporter
from leasectl.demo.target import embedded_target, external_target


def run_demo(
    *,
    dsn: str | None,
    schema: str,
    fresh: bool,
    headless: bool,
    duration: timedelta | None,
    refresh: timedelta = timedelta(seconds=1),
    log: TextIO | None = None,
    fleet: FleetConfig | None = None,
    run_id: str | None = None,
    log_dir: Path | None = None,
    console: ConsoleRunner | None = None,
) -> DemoSummary:
    """Run the demo; see the module docstring. Returns when the duration is over (headless),
    the console closes, or on SIGINT/SIGTERM/SIGHUP (a second signal: SIGKILL the fleet).

    ``log`` gets progress lines (default: stderr, but not while the console is open; always the
    file demo.log in the log directory). ``log_dir`` keeps worker logs (default: a temporary
    directory, removed after a clean run but for the demo.log the console's first line named).
    ``console`` replaces the Textual console (tests).
    """
    config = fleet or FleetConfig()
    if duration is not None and duration <= timedelta(0):
        raise UsageError("the demo duration must be greater than zero")
    console_run = None if headless else (console or load_console())
    run_id = run_id or secrets.token_hex(4)
    own_logs = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix=f"leasectl-demo-{run_id}-")) if log_dir is None else log_dir
    logs.mkdir(parents=True, exist_ok=True)
    # With the console, progress goes to stderr too until it opens and once it has closed:
    # starting a server takes seconds, and a blank screen says nothing.
    reporter = Reporter(log if log is not None else sys.stderr, logs / "demo.log")
    say = reporter.say
    interrupted = threading.Event()
    force = threading.Event()
    current: list[Run] = []
    signals_seen: list[Signals] = []

    def on_signal(signum: int, count: int) -> None:
        interrupted.set()
        if count > 1:
            force.set()
            for run in current:
                run.fleet.stop(force=True)
        elif console_run is not None:
            threading.Thread(
                target=console_hang_guard,
                args=(signals_seen, lambda: _abandon(current, force)),
                name="leasectl demo-hang-guard",
                daemon=True,
            ).start()

    summary: DemoSummary | None = None
    try:
        with Signals(on_signal) as signals:
            signals_seen.append(signals)
            if dsn is None:
                where = embedded_target(schema, fresh, say)
            else:
                where = external_target(dsn, schema, fresh, say)
            with where as target:
                run = Run(target, config, run_id, logs, say, interrupted)
                current.append(run)
                try:
                    run.start()
                    if not interrupted.is_set():
                        if console_run is None:
                            run.wait(duration)
                        else:
                            with (
                                terminal.last_resort(lambda: _abandon(current, force)),
                                reporter.muted(log is None),
                            ):
                                console_in_foreground(
                                    console_run, run, signals, target, refresh, duration, say
                                )
                    if signals.received is not None:
                        say(f"{signal.Signals(signals.received).name}: stopping the demo")
                    summary = run.finish(drain=headless, force=force)
                finally:
                    run.close(force)
    finally:
        reporter.close()
        clean = summary is not None and summary.ok and summary.worker_crashes == 0
        if own_logs and clean:
            _remove_logs(logs, keep_demo_log=console_run is not None)
    assert summary is not None
    if not (own_logs and clean) or logs.exists():
        summary = DemoSummary(**{**asdict(summary), "log_dir": str(logs)})
    return summary


def _remove_logs(logs: Path, *, keep_demo_log: bool) -> None:
    """After a clean run; the console's opening line named demo.log, so it stays then (and the
    summary names its directory): no line may point at a file that is gone."""
    if not keep_demo_log:
        shutil.rmtree(logs, ignore_errors=True)
        return
    for entry in logs.iterdir():
        if entry.name == "demo.log":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _abandon(runs: list[Run], force: threading.Event) -> None:
    """Stop what the demo started, from any thread, before the process exits without unwinding
    (the main thread is stuck in the console): the fleet (SIGKILL), the watcher, the pool and
    the embedded server this demo owns. Its demo.owner file stays: the next demo stops such a
    server anyway."""
    force.set()
    for run in runs:
        run.fleet.stop(force=True)
        if run.target.release is not None:  # first: the workers die with the demo, it does not
            run.target.release()
        run.close(force)
