"""The demo's fleet: real worker processes, and the chaos that shows what leases are for.

One thread (``Fleet.run``) owns every worker process from spawn to reap: it starts them,
restarts those that die, SIGKILLs one now and then, SIGSTOPs another past its lease, and stops
them all at the end. Spawning from that one long-lived thread matters: PR_SET_PDEATHSIG fires
when the *thread* that forked a child ends, so the workers must not be forked by a short-lived
thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

from leasectl.core.errors import LeasectlError, UsageError
from leasectl.db import demo as demo_db
from leasectl.db.connection import Database

log = logging.getLogger(__name__)

HANDLER = "leasectl.demo.handlers:handle"
RUN_ENV = "LEASECTL_DEMO_RUN"
TICK = 0.1  # the control loop's period
DB_POLL = 0.25  # how often the control loop may ask the database


@dataclass(frozen=True)
class FleetConfig:
    """Timings of a demo run. The defaults make every console panel move within a minute."""

    lease_ttl: timedelta = timedelta(seconds=5)
    heartbeat_every: timedelta = timedelta(seconds=1)
    watch_interval: timedelta = timedelta(seconds=2)
    chaos_every: timedelta = timedelta(seconds=20)  # one SIGKILL and one stall per period
    restart_delay: timedelta = timedelta(seconds=1)
    drain_timeout: timedelta = timedelta(seconds=20)
    poison_every: timedelta = timedelta(seconds=30)
    progress_every: timedelta = timedelta(seconds=5)
    worker_grace: timedelta = timedelta(seconds=1)
    rate: float = 1.0  # multiplies the producer's jobs per second
    seed: int | None = None

    def __post_init__(self) -> None:
        positive = {
            "lease_ttl": self.lease_ttl,
            "heartbeat_every": self.heartbeat_every,
            "watch_interval": self.watch_interval,
            "chaos_every": self.chaos_every,
            "poison_every": self.poison_every,
            "progress_every": self.progress_every,
        }
        for name, value in positive.items():
            if value <= timedelta(0):
                raise UsageError(f"demo {name} must be greater than zero")
        if self.heartbeat_every >= self.lease_ttl:
            raise UsageError("demo heartbeat_every must be shorter than lease_ttl")
        if min(self.restart_delay, self.drain_timeout, self.worker_grace) < timedelta(0):
            raise UsageError("demo delays must not be negative")
        if not 0 < self.rate <= 100:
            raise UsageError("demo rate must be in (0, 100]")

    @property
    def stall_limit(self) -> float:
        """The longest a stalled worker stays stopped: its lease, then watcher passes."""
        return (self.lease_ttl + 3 * self.watch_interval).total_seconds() + 2


Role = Literal["steady", "crashes", "stalls"]


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    queues: tuple[str, ...]
    concurrency: int
    role: Role


# reports-1 is alone on its queue, so only the watcher can move its lapsed leases: each stall
# ends in a watcher requeue. payments-2 shares its queue, so its lapsed leases go to whoever
# comes first: the watcher, or payments-1 claiming an expired lease directly.
FLEET: tuple[WorkerSpec, ...] = (
    WorkerSpec("payments-1", ("payments",), 2, "steady"),
    WorkerSpec("payments-2", ("payments",), 2, "crashes"),
    WorkerSpec("emails-1", ("emails",), 2, "steady"),
    WorkerSpec("reports-1", ("reports",), 3, "stalls"),
)


def worker_id(name: str, run_id: str, start: int) -> str:
    """hostname:run.start:role, like the default `hostname:pid:random` with the fleet role as
    the suffix; known before the process exists, and new for every (re)start."""
    return f"{socket.gethostname()}:{run_id}.{start}:{name}"


def processes_of_run(run_id: str) -> list[int]:
    """Pids of live processes of this run (its workers carry ``$LEASECTL_DEMO_RUN``)."""
    if not os.path.isdir("/proc/self"):
        return []
    marker = f"\0{RUN_ENV}={run_id}\0".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if marker in b"\0" + environ + b"\0" and state not in ("Z", "X"):
            found.append(int(name))
    return found


def _ids(leases: list[tuple[int, int]]) -> str:
    return ", ".join(f"{job_id} (attempt {attempt})" for job_id, attempt in leases) or "none"


@dataclass
class _Member:
    spec: WorkerSpec
    proc: subprocess.Popen[bytes] | None = None
    worker_id: str = ""
    restart_at: float | None = None
    failures: int = 0
    killed: bool = False
    stopped: bool = False
    stall_leases: list[tuple[int, int]] = field(default_factory=list)
    stall_deadline: float = 0.0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """Signal the worker's whole process group (it is the leader of its own session)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


class Fleet:
    def __init__(
        self,
        *,
        dsn: str,
        schema: str,
        config: FleetConfig,
        run_id: str,
        log_dir: Path,
        db: Database,
        say: Callable[[str], None],
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        self.config = config
        self.run_id = run_id
        self.log_dir = log_dir
        self.db = db
        self.say = say
        self.members = [_Member(spec) for spec in FLEET]
        self.chaos = threading.Event()  # set: the kill/stall schedule runs
        self.chaos.set()
        self.stopping = threading.Event()  # set: stop every worker and return
        self.force = threading.Event()  # set: stop them with SIGKILL, now
        self.ready = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.started = self.reaped = self.restarts = self.crashes = 0
        self.kills = self.stalls = 0
        self._next_db = 0.0
        self._db_failing = False

    # -- the control loop -------------------------------------------------------------------

    def run(self) -> None:
        try:
            for m in self.members:
                self._spawn(m)
            next_stall = next_kill = float("inf")
            while not self.stopping.is_set():
                now = time.monotonic()
                self._reap(now)
                db_turn = now >= self._next_db
                if db_turn:
                    self._next_db = now + DB_POLL
                try:
                    if not self.ready.is_set():
                        if db_turn and self._all_registered():
                            self.ready.set()
                            every = self.config.chaos_every.total_seconds()
                            next_stall, next_kill = now + every * 0.25, now + every * 0.5
                    elif self.chaos.is_set():
                        if self._stall_step(now, next_stall, db_turn):
                            next_stall += self.config.chaos_every.total_seconds()
                        if self._kill_step(now, next_kill, db_turn):
                            next_kill += self.config.chaos_every.total_seconds()
                    else:
                        self._resume_all("the chaos is over")
                    self._db_failing = False
                except LeasectlError as exc:
                    if not self._db_failing:
                        self.say(f"fleet: {exc} (retrying)")
                    self._db_failing = True
                self.stopping.wait(TICK)
        except BaseException as exc:
            self.error = exc
            log.exception("the demo fleet failed")
        finally:
            try:
                self._shutdown()
            finally:
                self.done.set()

    def stop(self, *, force: bool = False) -> None:
        if force:
            self.force.set()
        self.chaos.clear()
        self.stopping.set()

    # -- processes --------------------------------------------------------------------------

    def _command(self, spec: WorkerSpec, worker: str) -> list[str]:
        """The `leasectl worker` command users run; the DSN goes in $LEASECTL_DSN, never in
        argv, which `ps` shows to every user."""
        c = self.config
        cmd = [sys.executable, "-m", "leasectl", "--schema", self.schema, "worker"]
        for queue in spec.queues:
            cmd += ["--queue", queue]
        return [
            *cmd,
            "--handler",
            HANDLER,
            "--worker-id",
            worker,
            "--concurrency",
            str(spec.concurrency),
            "--lease-ttl",
            f"{c.lease_ttl.total_seconds()}s",
            "--heartbeat-every",
            f"{c.heartbeat_every.total_seconds()}s",
            "--grace",
            f"{c.worker_grace.total_seconds()}s",
            "--poll-interval",
            "250ms",
            "--retry-base",
            "500ms",
            "--retry-cap",
            "4s",
            "--parent-pid",
            str(os.getpid()),
        ]

    def _spawn(self, m: _Member) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.update({"LEASECTL_DSN": self.dsn, RUN_ENV: self.run_id})
        worker = worker_id(m.spec.name, self.run_id, self.started + 1)
        with open(self.log_dir / f"{m.spec.name}.log", "ab") as out:
            m.proc = subprocess.Popen(
                self._command(m.spec, worker),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group, and off our terminal
            )
        m.worker_id = worker
        m.killed = m.stopped = False
        m.restart_at = None
        self.started += 1

    def _reap(self, now: float) -> None:
        for m in self.members:
            if m.proc is None:
                if m.restart_at is not None and now >= m.restart_at:
                    self._spawn(m)
                    self.restarts += 1
                    assert m.proc is not None
                    self.say(f"restarted {m.spec.name} as pid {m.proc.pid}")
                continue
            code = m.proc.poll()
            if code is None:
                continue
            self.reaped += 1
            pid, m.proc = m.proc.pid, None
            if m.killed:
                continue  # restart_at was set when we killed it
            self.crashes += 1
            m.failures += 1
            delay = min(10.0, max(0.5, self.config.restart_delay.total_seconds()) * m.failures)
            m.restart_at = now + delay
            self.say(
                f"{m.spec.name} (pid {pid}) exited with code {code}; restarting in {delay:.0f}s "
                f"(log: {self.log_dir / (m.spec.name + '.log')})"
            )

    def _all_registered(self) -> bool:
        if not all(m.alive for m in self.members):
            return False
        wanted = [m.worker_id for m in self.members]
        up = {r["worker_id"] for r in demo_db.rows(self.db, "demo_workers_up", {"ids": wanted})}
        return up.issuperset(wanted)

    def _held(self, m: _Member) -> list[tuple[int, int]]:
        found = demo_db.rows(self.db, "demo_leases_held", {"owner": m.worker_id})
        return [(r["id"], r["attempts"]) for r in found]

    # -- chaos ------------------------------------------------------------------------------

    def _victim(self, role: Role) -> _Member:
        return next(m for m in self.members if m.spec.role == role)

    def _kill_step(self, now: float, due: float, db_turn: bool) -> bool:
        """SIGKILL the crash-prone worker once it holds work (or a lease later, regardless)."""
        m = self._victim("crashes")
        if now < due or not m.alive or not db_turn:
            return False
        held = self._held(m)
        if not held and now < due + self.config.lease_ttl.total_seconds():
            return False
        assert m.proc is not None
        m.signal(signal.SIGKILL)
        m.killed = True
        m.failures = 0
        m.restart_at = now + self.config.restart_delay.total_seconds()
        self.kills += 1
        self.say(
            f"SIGKILL {m.spec.name} (pid {m.proc.pid}) holding job(s) {_ids(held)}: "
            f"its leases lapse within {self.config.lease_ttl.total_seconds():g}s and the "
            "watcher, or payments-1 claiming them, takes them over"
        )
        return True

    def _stall_step(self, now: float, due: float, db_turn: bool) -> bool:
        """SIGSTOP the stalling worker past its lease; SIGCONT once its leases were moved."""
        m = self._victim("stalls")
        if m.stopped:
            if db_turn:
                self._maybe_resume(m, now)
            return False
        if now < due or not m.alive or not db_turn:
            return False
        held = self._held(m)
        if not held and now < due + self.config.lease_ttl.total_seconds():
            return False
        assert m.proc is not None
        m.signal(signal.SIGSTOP)
        m.stopped = True
        m.stall_leases = held
        m.stall_deadline = now + self.config.stall_limit
        self.stalls += 1
        self.say(
            f"SIGSTOP {m.spec.name} (pid {m.proc.pid}) holding job(s) {_ids(held)}: its "
            f"heartbeat stops, its owner goes silent and its leases lapse within "
            f"{self.config.lease_ttl.total_seconds():g}s"
        )
        return True

    def _maybe_resume(self, m: _Member, now: float) -> None:
        still: list[int] = []
        if m.stall_leases:
            ids, attempts = zip(*m.stall_leases, strict=True)
            found = demo_db.rows(
                self.db,
                "demo_leases_still_held",
                {"ids": list(ids), "attempts": list(attempts), "owner": m.worker_id},
            )
            still = [r["id"] for r in found]
        if still and now < m.stall_deadline:
            return
        if not m.stall_leases and now < m.stall_deadline:
            return
        m.signal(signal.SIGCONT)
        m.stopped = False
        pid = m.proc.pid if m.proc else "?"
        if m.stall_leases and not still:
            self.say(
                f"SIGCONT {m.spec.name} (pid {pid}): its leases on job(s) "
                f"{_ids(m.stall_leases)} were taken over while it slept; its late heartbeat "
                "and results are refused (fenced by attempt)"
            )
        else:
            self.say(f"SIGCONT {m.spec.name} (pid {pid}) after {self.config.stall_limit:.0f}s")

    def _resume_all(self, why: str) -> None:
        for m in self.members:
            if m.stopped:
                m.signal(signal.SIGCONT)
                m.stopped = False
                self.say(f"SIGCONT {m.spec.name}: {why}")

    # -- shutdown ---------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """SIGTERM (the workers release what they hold), then SIGKILL whatever is left."""
        live = [m for m in self.members if m.proc is not None]
        sig = signal.SIGKILL if self.force.is_set() else signal.SIGTERM
        for m in live:
            if m.stopped:
                m.signal(signal.SIGCONT)  # a stopped process would sit on its SIGTERM
                m.stopped = False
            m.signal(sig)
        deadline = time.monotonic() + self.config.worker_grace.total_seconds() + 5
        while any(m.alive for m in live) and time.monotonic() < deadline:
            if self.force.is_set():
                for m in live:
                    m.signal(signal.SIGKILL)
            time.sleep(0.02)
        for m in live:
            assert m.proc is not None
            if m.proc.poll() is None:
                self.say(f"{m.spec.name} (pid {m.proc.pid}) ignored SIGTERM: SIGKILL")
                m.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                m.proc.wait(10)
            if m.proc.returncode is not None:
                self.reaped += 1
                m.proc = None
            m.restart_at = None

    def failing(self, times: int = 3) -> list[str]:
        """Workers that exited unexpectedly ``times`` times in a row."""
        return [m.spec.name for m in self.members if m.failures >= times]

    @property
    def left(self) -> int:
        """Worker processes of this run still alive (0 once the fleet has stopped)."""
        ours = sum(1 for m in self.members if m.alive)
        return max(ours, len(processes_of_run(self.run_id)))
