"""`leasectl demo`: a database, a fleet, a stream of jobs, some chaos, and the console on top.

Where it runs:
- no DSN: the embedded PostgreSQL (`EmbeddedServer.default()`), database ``leasectl_demo``,
  in the schema given. It is started on demand and reused when running. On exit it is stopped
  when this run started it, or when an earlier demo left it running (a demo that did not exit
  cleanly; ``demo.owner`` in the server directory marks a server a demo started). A server
  that was running for any other reason is left running. ``fresh`` drops the demo database.
- a DSN: that server, in a schema of the demo's own: ``leasectl_demo`` when the schema is the
  default ``leasectl`` (the demo never mixes its jobs into a real queue). The demo labels the
  schemas it creates and refuses any schema it did not create; ``fresh`` drops and recreates
  only such a labelled schema.
One demo at a time per embedded server or external schema (a session advisory lock, which a
SIGKILLed demo cannot leave behind).

Timeline (defaults; C = chaos_every = 20s): jobs flow at once and some fail and retry; a
poison job fails twice and the scripted operator quarantines it (Stuck) within seconds; at
C/4 reports-1 is SIGSTOPped while it holds work (owner silent, leases lapse, the watcher
requeues, SIGCONT, its late results are fenced off); at C/2 payments-2 is SIGKILLed while it
holds work and restarted a second later; then again every C.

Headless, after ``duration``: the producer stops, the fleet drains (bounded by
drain_timeout), the workers get SIGTERM (they release what they hold), the leases of killed
workers are left to lapse, a last watcher pass runs, and the database is counted.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TextIO, cast

from leasectl.core import terminal
from leasectl.core.config import DEFAULT_SCHEMA
from leasectl.core.errors import EmbeddedServerError, LeasectlError, TerminalGone, UsageError
from leasectl.db import demo as demo_db
from leasectl.db.connection import Database
from leasectl.db.dsn import safe_dsn, validate_dsn
from leasectl.db.embedded import EmbeddedServer
from leasectl.db.operations import Operations
from leasectl.demo.fleet import FLEET, Fleet, FleetConfig
from leasectl.demo.traffic import Traffic
from leasectl.runtime.watcher import Watcher, WatcherConfig, run_pass

DEMO_DATABASE = "leasectl_demo"
DEMO_SCHEMA = "leasectl_demo"
OWNER_FILE = "demo.owner"
EMBEDDED_LOCK_KEY = "leasectl demo: embedded server"
READY_TIMEOUT = 60.0  # python start-up of the fleet on a loaded machine


class ConsoleRunner(Protocol):
    def __call__(
        self,
        dsn: str,
        schema: str,
        *,
        refresh: timedelta,
        queue: str | None,
        read_only: bool,
    ) -> None: ...


@dataclass(frozen=True)
class DemoSummary:
    """What a demo run did, counted in the database over the jobs this run enqueued.

    ``lost`` must be 0: jobs enqueued but gone, jobs completed twice, and (when the run could
    settle: every worker stopped, every lease lapsed, a last watcher pass) jobs still
    Processing. ``unfinished`` is the honest remainder that is not lost: jobs still Pending
    (waiting out a retry backoff when the drain ended), and, after an interrupted run, jobs
    whose lease a killed worker still held (the next watcher pass requeues them).
    """

    run_id: str
    target: str
    schema: str
    server: str  # started, reused, adopted (left running by a crashed demo) or external
    seconds: float
    drain_seconds: float
    drained: bool
    interrupted: bool
    enqueued: int
    completed: int
    failed: int
    stuck: int
    pending: int
    processing: int
    retried: int  # failed attempts: each one went back to Pending with backoff, or ended Failed
    requeued_by_watcher: int
    taken_over: int  # lapsed leases claimed directly by another worker
    leases_expired: int
    quarantined: int
    worker_kills: int
    worker_stalls: int
    worker_restarts: int
    worker_crashes: int
    workers_started: int
    workers_stopped: int
    workers_left: int
    unfinished: int
    lost: int
    log_dir: str | None = None

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.workers_left == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def render(self) -> str:
        """The summary as a few lines of text for people."""
        if self.interrupted:
            ending = "interrupted"
        elif self.drained:
            ending = f"drained in {self.drain_seconds:.0f}s"
        elif self.drain_seconds:
            ending = f"not drained after {self.drain_seconds:.0f}s"
        else:
            ending = "stopped"
        lines = [
            f"leasectl demo {self.run_id} on {self.target} (schema {self.schema}, "
            f"server {self.server}): ran {self.seconds:.0f}s, {ending}",
            f"  jobs      {self.enqueued} enqueued: {self.completed} completed, "
            f"{self.failed} failed, {self.stuck} stuck, {self.pending} pending, "
            f"{self.processing} processing",
            f"  recovery  {self.retried} failed attempts retried with backoff; "
            f"{self.leases_expired} leases lapsed: {self.requeued_by_watcher} requeued by the "
            f"watcher, {self.taken_over} taken over by a worker; "
            f"{self.quarantined} quarantined by the operator",
            f"  fleet     {self.workers_started} worker processes started, "
            f"{self.workers_stopped} stopped, {self.workers_left} left; {self.worker_kills} "
            f"SIGKILLed, {self.worker_stalls} stalled past their lease, "
            f"{self.worker_restarts} restarts, {self.worker_crashes} unexpected exits",
            f"  result    lost {self.lost}, unfinished {self.unfinished}"
            + ("" if self.ok else "  <-- NOT OK"),
        ]
        if self.log_dir:
            lines.append(f"  logs      {self.log_dir}")
        return "\n".join(lines)


# -- output and signals -------------------------------------------------------------------------


class _Reporter:
    """Progress lines with the time since the start, to a stream and to demo.log."""

    def __init__(self, stream: TextIO | None, path: Path) -> None:
        self.stream = stream
        self.file = path.open("a", encoding="utf-8")
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def say(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {message}"
        with self.lock:
            for out in (self.stream, self.file):
                if out is not None:
                    with contextlib.suppress(OSError, ValueError):
                        print(line, file=out, flush=True)

    def close(self) -> None:
        self.file.close()


class _Signals:
    """SIGINT, SIGTERM and SIGHUP stop the demo (a second one: at once). The handler only sets
    flags: printing from a signal handler can re-enter a stream the main thread is writing.

    While the console runs, SIGINT belongs to Python's default handler, so asyncio cancels the
    Textual app; SIGTERM and SIGHUP are turned into a SIGINT for the same reason."""

    HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, on_signal: Callable[[int, int], None]) -> None:
        self.on_signal = on_signal
        self.count = 0
        self.received: int | None = None
        self.in_console = False
        self.previous: dict[int, Any] = {}
        self.active = False

    def __enter__(self) -> _Signals:
        self.active = threading.current_thread() is threading.main_thread()
        if self.active:
            for sig in self.HANDLED:
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            if handler is not None:
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.received = self.received or signum
        self.on_signal(signum, self.count)
        if self.in_console and signum != signal.SIGINT:
            os.kill(os.getpid(), signal.SIGINT)

    @contextlib.contextmanager
    def console(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.in_console = True
        try:
            yield
        finally:
            self.in_console = False
            signal.signal(signal.SIGINT, self._handle)


def load_console() -> ConsoleRunner:
    """The console's entry point, imported only now: the core never imports Textual."""
    try:
        module = importlib.import_module("leasectl.console.app")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("leasectl.console"):
            raise LeasectlError(
                "the console is not part of this build of leasectl; "
                "run `leasectl demo --headless` instead"
            ) from None
        raise LeasectlError(f"the console cannot start: {exc}") from None
    return cast(ConsoleRunner, module.run)


# -- where the demo runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Target:
    dsn: str
    schema: str
    where: str
    server: str
    # Stops the embedded server this demo owns, for an exit that cannot unwind (_abandon).
    release: Callable[[], None] | None = None


def _try_lock(conn: Any, key: str) -> bool:
    return bool(demo_db.execute(conn, "demo_lock_try", {"key": key})[0]["locked"])


def _migrate(dsn: str, schema: str) -> None:
    with Database.connect(
        dsn, schema, check_schema=False, application_name="leasectl demo"
    ) as database:
        database.migrate()


def _write_owner(path: Path) -> None:
    path.write_text(f"pid {os.getpid()}: this embedded server was started by `leasectl demo`\n")


@contextlib.contextmanager
def _embedded_target(schema: str, fresh: bool, say: Callable[[str], None]) -> Iterator[_Target]:
    server = EmbeddedServer.default()
    was_running = server.is_running()
    _ = server.port  # creates the server directory (with the right modes) and fixes the port
    owner_file = server.base_dir / OWNER_FILE
    if was_running:
        say(f"reusing the embedded PostgreSQL running in {server.base_dir}")
    else:
        _write_owner(owner_file)  # before starting: a demo killed mid-start still marks it
        say(f"starting the embedded PostgreSQL in {server.base_dir}")
    server.start()
    mode = "reused" if was_running else "started"
    owns = False
    conn = demo_db.connect(server.dsn("postgres"), "leasectl demo")
    try:
        if not _try_lock(conn, EMBEDDED_LOCK_KEY):
            raise LeasectlError(
                f"another leasectl demo is running on the embedded server in {server.base_dir}; "
                "stop it first, or point this one elsewhere with --dsn"
            )
        if was_running and owner_file.exists():
            mode = "adopted"
            say("an earlier demo that did not exit cleanly left it running: stopping it on exit")
        owns = mode != "reused"
        if owns:
            _write_owner(owner_file)
        exists = demo_db.execute(conn, "demo_database_exists", {"name": DEMO_DATABASE})[0][
            "present"
        ]
        if fresh and exists:
            say(f"fresh: dropping database {DEMO_DATABASE}")
            demo_db.execute(conn, "demo_database_drop", database=DEMO_DATABASE)
        if fresh or not exists:
            demo_db.execute(conn, "demo_database_create", database=DEMO_DATABASE)
        dsn = server.dsn(DEMO_DATABASE)
        _migrate(dsn, schema)
        release = server.stop if owns else None
        yield _Target(dsn, schema, safe_dsn(dsn), mode, release)
    finally:
        conn.close()
        if owns:
            say("stopping the embedded PostgreSQL")
            try:
                server.stop()
                owner_file.unlink(missing_ok=True)
            except EmbeddedServerError as exc:
                say(f"could not stop the embedded PostgreSQL: {exc}")
        elif mode == "reused":
            say("leaving the embedded PostgreSQL running: it was running before the demo")


@contextlib.contextmanager
def _external_target(
    dsn: str, schema: str, fresh: bool, say: Callable[[str], None]
) -> Iterator[_Target]:
    validate_dsn(dsn)
    where = safe_dsn(dsn)
    effective = DEMO_SCHEMA if schema == DEFAULT_SCHEMA else schema
    if effective != schema:
        say(
            f"using schema {effective!r} in {where}: the demo stays out of the default "
            f"{DEFAULT_SCHEMA!r} schema of a real database (choose another with --schema)"
        )
    conn = demo_db.connect(dsn, "leasectl demo")
    try:
        if not _try_lock(conn, f"leasectl demo: schema {effective}"):
            raise LeasectlError(
                f"another leasectl demo is running in schema {effective!r} at {where}"
            )
        state = demo_db.execute(conn, "demo_schema_state", {"schema": effective})[0]
        if state["present"] and not state["ours"]:
            raise LeasectlError(
                f"schema {effective!r} at {where} was not created by leasectl demo; refusing to "
                f"{'drop' if fresh else 'run the demo in'} it: pass --schema with an unused name"
            )
        if fresh and state["present"]:
            say(f"fresh: dropping the demo's schema {effective!r} at {where}")
            demo_db.execute(conn, "demo_schema_drop", schema=effective)
        if fresh or not state["present"]:
            demo_db.execute(conn, "demo_schema_create", schema=effective)
            demo_db.execute(conn, "demo_schema_mark", schema=effective)
        _migrate(dsn, effective)
        yield _Target(dsn, effective, where, "external")
    finally:
        conn.close()


# -- one run ------------------------------------------------------------------------------------


class _Run:
    def __init__(
        self,
        target: _Target,
        config: FleetConfig,
        run_id: str,
        log_dir: Path,
        say: Callable[[str], None],
        interrupted: threading.Event,
    ) -> None:
        self.target = target
        self.config = config
        self.run_id = run_id
        self.log_dir = log_dir
        self.say = say
        self.interrupted = interrupted
        self.db = Database.connect(
            target.dsn, target.schema, max_size=6, application_name="leasectl demo"
        )
        self.ops = Operations(self.db)
        self.watcher = Watcher(self.ops, WatcherConfig(interval=config.watch_interval))
        self.fleet = Fleet(
            dsn=target.dsn,
            schema=target.schema,
            config=config,
            run_id=run_id,
            log_dir=log_dir,
            db=self.db,
            say=say,
        )
        self.traffic = Traffic(self.ops, config, run_id, say)
        self.threads = {
            "watcher": threading.Thread(target=self.watcher.run, name="leasectl-demo-watcher"),
            "fleet": threading.Thread(target=self.fleet.run, name="leasectl-demo-fleet"),
            "traffic": threading.Thread(target=self.traffic.run, name="leasectl-demo-traffic"),
        }
        self.started = time.monotonic()
        self.closed = False

    def start(self) -> None:
        left = demo_db.rows(self.db, "demo_live_leases")[0]["processing"]
        if left:
            self.say(
                f"{left} job(s) are still leased by workers of an earlier demo that did not exit "
                "cleanly: their leases lapse and the watcher requeues them"
            )
        self.threads["watcher"].start()
        self.threads["fleet"].start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.fleet.ready.wait(0.05):
            if self.interrupted.is_set():
                return
            if self.fleet.failing():
                raise LeasectlError(
                    f"the demo's workers keep exiting{self._worker_complaint()}; "
                    f"worker logs in {self.log_dir}"
                )
            if self.fleet.done.is_set() or time.monotonic() > deadline:
                raise LeasectlError(
                    f"the demo's workers did not come up within {READY_TIMEOUT:.0f}s"
                    f"{self._worker_complaint()}; worker logs in {self.log_dir}"
                )
        self.threads["traffic"].start()
        self.started = time.monotonic()
        c = self.config
        self.say(
            f"fleet up: {', '.join(s.name for s in FLEET)}; leases {c.lease_ttl.total_seconds():g}s"
            f", heartbeat every {c.heartbeat_every.total_seconds():g}s, watcher every "
            f"{c.watch_interval.total_seconds():g}s; a stall and a SIGKILL every "
            f"{c.chaos_every.total_seconds():g}s"
        )

    def _worker_complaint(self) -> str:
        """The last log line of a failing worker (else of any worker), for the error."""
        for name in [*self.fleet.failing(1), *(s.name for s in FLEET)]:
            with contextlib.suppress(OSError):
                lines = (self.log_dir / f"{name}.log").read_text(errors="replace")
                tail = [ln for ln in lines.splitlines() if ln.strip()]
                if tail:
                    return f" ({name}: {tail[-1].strip()[:300]})"
        return ""

    def wait(self, duration: timedelta | None) -> None:
        """Headless: let the fleet run for ``duration`` (None: until a signal), with progress."""
        end = None if duration is None else self.started + duration.total_seconds()
        every = self.config.progress_every.total_seconds()
        next_progress = self.started + every
        while not self.interrupted.is_set():
            now = time.monotonic()
            if end is not None and now >= end:
                return
            if self.fleet.done.is_set():
                raise LeasectlError("the demo fleet stopped unexpectedly")
            if now >= next_progress:
                self.progress()
                next_progress += every
            stops = [t for t in (end, next_progress) if t is not None]
            self.interrupted.wait(max(0.01, min(stops) - now))

    def _tally(self) -> demo_db.Tally:
        return demo_db.tally(
            self.db,
            self.traffic.ids,
            watcher=self.watcher.config.actor,
            operator=self.traffic.actor,
        )

    def progress(self) -> None:
        try:
            t = self._tally()
        except LeasectlError as exc:
            self.say(f"progress: {exc}")
            return
        f = self.fleet
        self.say(
            f"{len(self.traffic.ids)} enqueued: {t.completed} completed, {t.failed} failed, "
            f"{t.stuck} stuck, {t.processing} processing, {t.pending} pending | "
            f"{t.failed_attempts} retries, {t.watcher_requeued} watcher requeues | "
            f"{f.kills} kills, {f.stalls} stalls"
        )

    def _drain(self) -> tuple[bool, float]:
        """Producer stopped: let the fleet finish what is queued, for a bounded time."""
        started = time.monotonic()
        deadline = started + self.config.drain_timeout.total_seconds()
        t = self._tally()
        self.say(
            f"producer stopped; draining {t.open} open jobs "
            f"(at most {self.config.drain_timeout.total_seconds():g}s)"
        )
        next_progress = started + self.config.progress_every.total_seconds()
        while t.open and not self.interrupted.is_set() and time.monotonic() < deadline:
            self.interrupted.wait(0.2)
            t = self._tally()
            if time.monotonic() >= next_progress:
                self.say(f"draining: {t.pending} pending, {t.processing} processing")
                next_progress += self.config.progress_every.total_seconds()
        return t.open == 0, time.monotonic() - started

    def _settle(self) -> bool:
        """All workers stopped: wait for the leases killed workers still hold to lapse, so that
        the last watcher pass leaves nothing Processing in the schema (not even the leftovers
        of an earlier demo that was killed). Only demos use the schema, one at a time."""
        deadline = time.monotonic() + self.config.lease_ttl.total_seconds() + 2
        while demo_db.rows(self.db, "demo_live_leases")[0]["leased"]:
            if self.interrupted.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def finish(self, *, drain: bool, force: threading.Event) -> DemoSummary:
        ran = time.monotonic() - self.started
        self.traffic.stop_producing()
        self.fleet.chaos.clear()
        drained, drain_s = False, 0.0
        if drain and not self.interrupted.is_set():
            drained, drain_s = self._drain()
        self._stop_threads(force)
        settled = not self.interrupted.is_set() and self._settle()
        try:
            final = run_pass(self.ops, self.watcher.config, listed=0)
            if final.total:
                self.say(f"last watcher pass: requeued {final.requeued}, failed {final.failed}")
        except LeasectlError as exc:
            self.say(f"last watcher pass failed: {exc}")
        t = self._tally()
        ids = self.traffic.ids
        missing = len(ids) - t.present
        lost = missing + t.completed_twice + (t.processing if settled else 0)
        f = self.fleet
        summary = DemoSummary(
            run_id=self.run_id,
            target=self.target.where,
            schema=self.target.schema,
            server=self.target.server,
            seconds=round(ran, 1),
            drain_seconds=round(drain_s, 1),
            drained=drained,
            interrupted=self.interrupted.is_set(),
            enqueued=len(ids),
            completed=t.completed,
            failed=t.failed,
            stuck=t.stuck,
            pending=t.pending,
            processing=t.processing,
            retried=t.failed_attempts,
            requeued_by_watcher=t.watcher_requeued,
            taken_over=max(0, t.expired_leases - t.watcher_moved),
            leases_expired=t.expired_leases,
            quarantined=t.quarantined,
            worker_kills=f.kills,
            worker_stalls=f.stalls,
            worker_restarts=f.restarts,
            worker_crashes=f.crashes,
            workers_started=f.started,
            workers_stopped=f.reaped,
            workers_left=f.left,
            unfinished=t.pending + (0 if settled else t.processing),
            lost=lost,
        )
        self.say(
            f"done: {summary.enqueued} enqueued, {summary.completed} completed, "
            f"lost {summary.lost}, unfinished {summary.unfinished}"
        )
        return summary

    def _stop_threads(self, force: threading.Event) -> None:
        self.traffic.stop()
        self.fleet.stop(force=force.is_set())
        for name in ("traffic", "fleet"):
            thread = self.threads[name]
            if thread.is_alive():
                thread.join(timeout=60)
        self.watcher.stop()

    def close(self, force: threading.Event) -> None:
        """Idempotent: stop every thread and process, then close the pool."""
        if self.closed:
            return
        self.closed = True
        self._stop_threads(force)
        watcher = self.threads["watcher"]
        if watcher.is_alive():
            watcher.join(timeout=30)
        self.db.close()


# -- the entry point ----------------------------------------------------------------------------


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

    ``log`` gets progress lines (default: stderr when headless; with the console, only the
    file demo.log in the log directory). ``log_dir`` keeps worker logs (default: a temporary
    directory, removed after a clean run). ``console`` replaces the Textual console (tests).
    """
    config = fleet or FleetConfig()
    if duration is not None and duration <= timedelta(0):
        raise UsageError("the demo duration must be greater than zero")
    console_run = None if headless else (console or load_console())
    run_id = run_id or secrets.token_hex(4)
    own_logs = log_dir is None
    logs = Path(tempfile.mkdtemp(prefix=f"leasectl-demo-{run_id}-")) if log_dir is None else log_dir
    logs.mkdir(parents=True, exist_ok=True)
    reporter = _Reporter(
        log if log is not None else (sys.stderr if headless else None), logs / "demo.log"
    )
    say = reporter.say
    interrupted = threading.Event()
    force = threading.Event()
    current: list[_Run] = []
    signals_seen: list[_Signals] = []

    def on_signal(signum: int, count: int) -> None:
        interrupted.set()
        if count > 1:
            force.set()
            for run in current:
                run.fleet.stop(force=True)
        elif console_run is not None:
            threading.Thread(
                target=_console_hang_guard,
                args=(signals_seen, lambda: _abandon(current, force)),
                name="leasectl demo-hang-guard",
                daemon=True,
            ).start()

    summary: DemoSummary | None = None
    try:
        with _Signals(on_signal) as signals:
            signals_seen.append(signals)
            if dsn is None:
                where = _embedded_target(schema, fresh, say)
            else:
                where = _external_target(dsn, schema, fresh, say)
            with where as target:
                run = _Run(target, config, run_id, logs, say, interrupted)
                current.append(run)
                try:
                    run.start()
                    if not interrupted.is_set():
                        if console_run is None:
                            run.wait(duration)
                        else:
                            with terminal.last_resort(lambda: _abandon(current, force)):
                                _console(console_run, run, signals, target, refresh, duration, say)
                    if signals.received is not None:
                        say(f"{signal.Signals(signals.received).name}: stopping the demo")
                    summary = run.finish(drain=headless, force=force)
                finally:
                    run.close(force)
    finally:
        reporter.close()
        clean = summary is not None and summary.ok and summary.worker_crashes == 0
        if own_logs and clean:
            shutil.rmtree(logs, ignore_errors=True)
    assert summary is not None
    if not (own_logs and clean):
        summary = DemoSummary(**{**asdict(summary), "log_dir": str(logs)})
    return summary


CONSOLE_EXIT_GRACE = 5.0  # seconds a stopping console may take before the demo exits without it


def _console_hang_guard(signals: list[_Signals], abandon: Callable[[], None]) -> None:
    """A console asked to stop by a signal can hang in Textual's shutdown, its writer thread
    blocked on a terminal that does not read. Give it a few seconds; if it is still in front
    then, stop the fleet and the server here and leave, so nothing outlives the demo. (A
    terminal that went away is the console's own watch: leasectl/core/terminal.py.)"""
    time.sleep(CONSOLE_EXIT_GRACE)
    if not any(s.in_console for s in signals):
        return
    abandon()
    os._exit(129)


def _abandon(runs: list[_Run], force: threading.Event) -> None:
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


def _console(
    console_run: ConsoleRunner,
    run: _Run,
    signals: _Signals,
    target: _Target,
    refresh: timedelta,
    duration: timedelta | None,
    say: Callable[[str], None],
) -> None:
    """The console in the foreground; the fleet keeps running in its threads.

    The console offers no handle to close it, so ``duration`` closes it with a SIGINT: asyncio
    turns that into a clean cancellation of the app. The lock keeps the timer from firing once
    the console has returned."""
    print(
        f"leasectl demo: console on {target.where} (schema {target.schema}); fleet events in "
        f"{run.log_dir / 'demo.log'}",
        file=sys.stderr,
        flush=True,
    )
    lock = threading.Lock()
    closed = threading.Event()
    fired = threading.Event()

    def close_console() -> None:
        with lock:
            if not closed.is_set():
                fired.set()
                os.kill(os.getpid(), signal.SIGINT)

    timer = None
    if duration is not None:
        timer = threading.Timer(duration.total_seconds(), close_console)
        timer.daemon = True
    say("console open")
    with signals.console():
        try:
            if timer is not None:
                timer.start()
            try:
                console_run(target.dsn, target.schema, refresh=refresh, queue=None, read_only=False)
            finally:
                with lock:
                    closed.set()
                if timer is not None:
                    timer.cancel()
        except KeyboardInterrupt:
            if not fired.is_set():
                run.interrupted.set()
        except TerminalGone as exc:
            say(str(exc))
            run.interrupted.set()
    say("console closed")
