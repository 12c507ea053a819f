"""The demo's traffic: a producer with a steady, varied stream of jobs, and a scripted operator
who quarantines poison jobs (the Stuck panel's story)."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leasectl.core.errors import LeasectlError
from leasectl.core.models import JobStatus
from leasectl.db.operations import Operations
from leasectl.demo.fleet import FleetConfig

TICK = 0.2
MAX_ATTEMPTS = 4
POISON_MAX_ATTEMPTS = 10  # room for the operator to step in long before it would end Failed
QUARANTINE_AFTER = 2  # failed attempts before the operator quarantines a poison job
QUARANTINE_REASON = (
    "poison job: fails the same way on every attempt; quarantined for a human "
    "(requeue it from the console to watch it fail again)"
)


def operator_actor() -> str:
    return f"operator:leasectl-demo@{socket.gethostname()}"


@dataclass(frozen=True)
class QueueTraffic:
    queue: str
    per_second: float
    burst: int  # jobs enqueued at once when the demo starts
    seconds: tuple[float, float]  # range of the work a job asks for


TRAFFIC: tuple[QueueTraffic, ...] = (
    QueueTraffic("payments", 1.2, 3, (0.4, 2.0)),
    QueueTraffic("emails", 1.0, 2, (0.2, 1.0)),
    QueueTraffic("reports", 0.3, 2, (2.0, 6.0)),  # longer than a lease: heartbeats show
)


class Traffic:
    def __init__(
        self, ops: Operations, config: FleetConfig, run_id: str, say: Callable[[str], None]
    ) -> None:
        self.ops = ops
        self.config = config
        self.run_id = run_id
        self.say = say
        self.rng = random.Random(config.seed)
        self.producing = threading.Event()
        self.producing.set()
        self.stopping = threading.Event()
        self.actor = operator_actor()
        self.quarantined = 0
        self._ids: list[int] = []
        self._lock = threading.Lock()
        self._poison: set[int] = set()
        self._made: Counter[str] = Counter()
        self._failing = False

    @property
    def ids(self) -> list[int]:
        with self._lock:
            return list(self._ids)

    def stop_producing(self) -> None:
        self.producing.clear()

    def stop(self) -> None:
        self.producing.clear()
        self.stopping.set()

    def run(self) -> None:
        started = time.monotonic()
        next_poison = started
        while not self.stopping.is_set():
            now = time.monotonic()
            try:
                if self.producing.is_set():
                    self._produce(now - started)
                    if now >= next_poison:
                        self._enqueue_poison()
                        next_poison += self.config.poison_every.total_seconds()
                self._operate()
                self._failing = False
            except LeasectlError as exc:
                if not self._failing:
                    self.say(f"traffic: {exc} (retrying)")
                self._failing = True
            self.stopping.wait(TICK)

    # -- producer ---------------------------------------------------------------------------

    def _produce(self, elapsed: float) -> None:
        for t in TRAFFIC:
            due = t.burst + int(t.per_second * self.config.rate * elapsed) - self._made[t.queue]
            if due > 0:
                payloads = [self._payload(t) for _ in range(due)]
                self._enqueue(payloads, t.queue, MAX_ATTEMPTS)
                self._made[t.queue] += due

    def _payload(self, t: QueueTraffic) -> dict[str, Any]:
        rng = self.rng
        n = self._made[t.queue] + 1
        payload: dict[str, Any] = {"demo_run": self.run_id}
        if t.queue == "payments":
            payload |= {"order": f"ord-{n:05d}", "amount_cents": rng.randint(300, 25_000)}
        elif t.queue == "emails":
            payload |= {
                "to": f"user{rng.randint(1, 999)}@example.com",
                "template": rng.choice(["receipt", "welcome", "password-reset"]),
            }
        else:
            payload |= {"report": rng.choice(["daily-sales", "inventory", "churn"]), "n": n}
        payload["seconds"] = round(rng.uniform(*t.seconds), 2)
        roll = rng.random()
        if roll < 0.02:
            payload["fail_attempts"] = 99  # fails every attempt: ends Failed
        elif roll < 0.07:
            payload["fail_attempts"] = 2
        elif roll < 0.19:
            payload["fail_attempts"] = 1
        return payload

    def _enqueue_poison(self) -> None:
        payload = {"demo_run": self.run_id, "template": "invoice-v2", "poison": True}
        [job_id] = self._enqueue([payload], "emails", POISON_MAX_ATTEMPTS)
        with self._lock:
            self._poison.add(job_id)

    def _enqueue(self, payloads: list[dict[str, Any]], queue: str, attempts: int) -> list[int]:
        ids = self.ops.enqueue(payloads, queue=queue, max_attempts=attempts)
        with self._lock:
            self._ids.extend(ids)
        return ids

    # -- the scripted operator --------------------------------------------------------------

    def _operate(self) -> None:
        with self._lock:
            watched = sorted(self._poison)
        if not watched:
            return
        for job in self.ops.get_jobs(watched).values():
            if job.status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.STUCK):
                with self._lock:
                    self._poison.discard(job.id)
                continue
            if job.status != JobStatus.PENDING or job.attempts < QUARANTINE_AFTER:
                continue
            result = self.ops.operator_mark_stuck(
                [job.seen()], actor=self.actor, reason=QUARANTINE_REASON
            )
            if job.id in result.changed:
                self.quarantined += 1
                with self._lock:
                    self._poison.discard(job.id)
                self.say(
                    f"operator quarantined poison job {job.id} as Stuck after {job.attempts} "
                    "failed attempts"
                )
