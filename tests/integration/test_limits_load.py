"""Flow control under real concurrency (full tier): a cap held by 16 racing claimers, a killed
worker's slot, a stopped worker's lapsed lease, the rate over a minute (also across worker
restarts), limits changed while workers run, and a throttled worker that sleeps instead of
polling.

Figures (throughput, trips) are printed, never asserted as performance.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl.core.errors import LockBusy
from leasectl.core.limits import CAP_RECHECK_S, LimitSpec
from leasectl.core.models import JobStatus
from leasectl.runtime.worker import JobContext
from tests.integration.test_limits import lapse
from tests.integration.test_worker_processes import WorkerProc
from tests.stores import Stores
from tests.util import wait_until

pytestmark = pytest.mark.full

Q = "payments"
TTL = timedelta(seconds=60)
LIVE = (
    "SELECT count(*) FROM leasectl.jobs WHERE status = 'Processing' AND queue = %s"
    " AND lease_until >= now()"
)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one instant (an end before a start at equal times)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


class Sampler:
    """Counts the queue's live leases continuously, each count one consistent snapshot."""

    def __init__(self, dsn: str) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dsn,), daemon=True)
        self._thread.start()

    def _run(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(LIVE, (Q,)).fetchone()
                self.samples.append(int(row[0]) if row else 0)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(10)
        return self.samples


@pytest.mark.parametrize(("cap", "wanted"), [(4, 2), (12, 2), (4, 1), (12, 1)])
def test_cap_holds_under_16_racing_claimers_and_is_used(db_dsn: str, cap: int, wanted: int) -> None:
    """16 claimers race for a queue capped at N: no snapshot ever sees more than N live leases,
    and neither does the ledger of every claim (each lease from its claim's return to the
    sending of its completion: within its true life); both reach N (the cap is used). The cap
    in shards (migration 24): 4 of 1 lease; 8 of 2, 2, 2, 2, 1, 1, 1, 1. Claimers of one job
    at a time too (a single-job worker's trips: each completes one lease and claims one)."""
    job_s, jobs = 0.1, 60 * cap
    with Stores.connect(db_dsn, "leasectl", max_size=24) as store:
        store.ops.enqueue([{"i": i} for i in range(jobs)], queue=Q)
        store.ops.set_limit(Q, LimitSpec(concurrency=cap), actor="t", reason="cap test")
        sampler = Sampler(db_dsn)
        started = time.monotonic()
        claimers = Claimers(store, 16, job_s, wanted)

        def drained() -> bool:
            with psycopg.connect(db_dsn) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM leasectl.jobs WHERE status = 'Completed'"
                ).fetchone()
            return bool(claimers.errors) or (row is not None and row[0] >= jobs)

        try:
            wait_until(
                drained,
                timeout=120,
                interval=0.2,
                what="the backlog drained",
            )
        finally:
            claimers.stop()
            samples = sampler.stop()
        elapsed = time.monotonic() - started
        ledger = claimers.ledger
        (limit,) = store.ops.limits([Q])
    print(
        f"\ncap {cap}, job {job_s}s: {jobs} jobs in {elapsed:.1f}s = {jobs / elapsed:.1f}/s "
        f"(N/job time = {cap / job_s:.0f}/s); {len(samples)} samples (mean live "
        f"{sum(samples) / max(len(samples), 1):.1f}), {limit.throttled} throttled claims"
    )
    assert max(samples) == cap
    assert len(ledger) == jobs
    assert most_at_once(ledger) == cap
    with psycopg.connect(db_dsn) as conn:
        row = conn.execute(
            "SELECT count(*), max(attempts) FROM leasectl.jobs WHERE status = 'Completed'"
        ).fetchone()
    assert row == (jobs, 1)  # every job once


@pytest.fixture
def worker_procs(db_dsn: str, tmp_path: Path) -> Iterator[Any]:
    started: list[WorkerProc] = []

    def start(worker_id: str, handler: str, *args: str) -> WorkerProc:
        w = WorkerProc(db_dsn, Q, handler, worker_id, tmp_path / f"{worker_id}.log", *args)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.poll() is None:
            w.signal(signal.SIGKILL)
            w.wait()
        w.close()


def test_a_killed_workers_slot_is_freed_when_its_lease_lapses_not_before(
    db_dsn: str, worker_procs: Any
) -> None:
    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.set_limit(Q, LimitSpec(concurrency=1), actor="t", reason="one at a time")
        [held, waiting] = store.ops.enqueue([{}, {}], queue=Q)
        w = worker_procs("doomed", "tests.handlers:block", "--lease-ttl", "3s")
        wait_until(lambda: store.ops.get_job(held).status == JobStatus.PROCESSING)
        w.signal(signal.SIGKILL)
        w.wait()
        lease_until = store.ops.get_job(held).lease_until
        assert lease_until is not None
        # Until the dead worker's lease lapses its slot is taken: a claim gets the other job
        # only after, by the claim's own clock (the now() its lease was taken at). (Not by a
        # clock read before the claim: a claim sent just before the lapse may run just after.)
        refused, deadline = 0, time.monotonic() + 60
        while True:
            trip = store.work.trip([], Q, "other", TTL, 5, take_expired=False)
            if trip.leases:
                break
            assert trip.throttle_wait == 0
            assert time.monotonic() < deadline, "the dead worker's slot was never freed"
            refused += 1
            time.sleep(0.2)  # (a probe's pace, not a synchronisation)
        [lease] = trip.leases
        assert lease.job_id == waiting
        claimed_at = lease.job.heartbeat_at
        assert claimed_at is not None and claimed_at > lease_until, (claimed_at, lease_until)
        assert refused > 0  # (the probes did run while the dead worker's lease was live)


def test_a_worker_whose_lapsed_lease_was_counted_free_cannot_renew_it(
    db_dsn: str, worker_procs: Any
) -> None:
    """Cap 1. A real worker holds the slot; it is stopped (SIGSTOP) while its lease lapses on
    the server's clock (set here, so that the worker's own deadline, 60 s, has not passed and
    its next heartbeat does go out), and another claim takes the slot. The worker is continued:
    its heartbeat is refused and it lets the job go, so the queue never has two live leases."""
    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.set_limit(Q, LimitSpec(concurrency=1), actor="t", reason="one at a time")
        [held, waiting] = store.ops.enqueue([{}, {}], queue=Q)
        w = worker_procs(
            "stopped", "tests.handlers:block", "--lease-ttl", "60s", "--heartbeat-every", "300ms"
        )
        wait_until(lambda: store.ops.get_job(held).status == JobStatus.PROCESSING)
        w.signal(signal.SIGSTOP)
        try:
            with psycopg.connect(db_dsn, autocommit=True) as conn:
                lapse(conn, held)
            [taken] = store.work.trip([], Q, "other", TTL, 5, take_expired=False).leases
            assert taken.job_id == waiting
            sampler = Sampler(db_dsn)
        finally:
            w.signal(signal.SIGCONT)
        try:
            wait_until(
                lambda: "heartbeat rejected: the lease is no longer this worker's" in w.text(),
                what="the stopped worker's heartbeat refused",
            )
        finally:
            samples = sampler.stop()
        job = store.ops.get_job(held)
        assert job.status == JobStatus.PROCESSING and job.lease_owner == "stopped"
        (limit,) = store.ops.limits([Q])
        assert job.lease_until is not None and job.lease_until < limit.db_now  # not renewed
        assert samples and max(samples) == 1 and limit.live == 1


def starts_between(dsn: str, since: datetime, until: datetime) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM leasectl.job_attempts AS a JOIN leasectl.jobs AS j"
            " ON j.id = a.job_id WHERE j.queue = %s AND a.started_at >= %s"
            " AND a.started_at < %s",
            (Q, since, until),
        ).fetchone()
    return int(row[0]) if row else 0


def db_now(dsn: str) -> datetime:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def noop(ctx: JobContext) -> None:
    return None


@pytest.mark.parametrize("rate", [10.0, 200.0])
def test_the_rate_over_a_minute_within_5_percent_across_worker_restarts(
    db_dsn: str, run_worker: Any, rate: float
) -> None:
    """10 starts a second (one shard) or 200 (two shards, each its own bucket: migration 24)
    with a backlog of far more, three workers of eight slots each, one of them replaced every
    10 s: the starts of one minute are 60 times the rate ± 5%."""
    expected = round(60 * rate)
    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.enqueue([{"i": i} for i in range(2 * expected)], queue=Q)
        store.ops.set_limit(Q, LimitSpec(rate=rate), actor="t", reason="rate test")
        workers = [
            run_worker(noop, queues=(Q,), concurrency=8, worker_id=f"w{i}") for i in range(3)
        ]
        # Past the first bucket (its burst): the window measures the steady rate.
        wait_until(lambda: store.ops.limits([Q])[0].throttled > 0, what="a throttled claim")
        since = db_now(db_dsn)
        for n in range(5):
            wait_until(
                lambda n=n: db_now(db_dsn) >= since + timedelta(seconds=10 * (n + 1)),
                timeout=30,
                interval=0.2,
            )
            workers[n % 3].stop()
            workers[n % 3] = run_worker(noop, queues=(Q,), concurrency=8, worker_id=f"w{n}-again")
        wait_until(
            lambda: db_now(db_dsn) >= since + timedelta(seconds=60), timeout=30, interval=0.2
        )
        started = starts_between(db_dsn, since, since + timedelta(seconds=60))
        trips = sum(w.ledger.stats.trips for w in workers)
    print(
        f"\nrate {rate:g}/s: {started} starts in 60 s (expected {expected}); last workers' "
        f"trips {trips}"
    )
    assert abs(started - expected) <= expected * 0.05


def test_limits_changed_while_workers_run_apply_within_a_claim_cycle(
    db_dsn: str, run_worker: Any
) -> None:
    """A cap lowered, raised and cleared under a running worker: each applies at its next
    claims (the NOTIFY of the change wakes a throttled worker)."""
    release = threading.Event()

    def held(ctx: JobContext) -> None:
        release.wait(30)

    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.set_limit(Q, LimitSpec(concurrency=2), actor="t", reason="start low")
        store.ops.enqueue([{"i": i} for i in range(40)], queue=Q)
        run_worker(held, queues=(Q,), concurrency=8, worker_id="w")

        def live() -> int:
            return store.ops.limits([Q])[0].live

        wait_until(lambda: live() == 2, what="the cap of 2 used")
        sampler = Sampler(db_dsn)
        store.ops.set_limit(Q, LimitSpec(concurrency=5), actor="t", reason="raise")
        wait_until(lambda: live() == 5, timeout=5, what="the raised cap used")
        assert max(sampler.stop()) <= 5
        store.ops.clear_limit(Q, actor="t", reason="lift")
        with psycopg.connect(db_dsn) as conn:
            wait_until(lambda: conn.execute(LIVE, (Q,)).fetchone() == (8,), timeout=5)
        release.set()


def test_a_throttled_worker_sleeps_until_its_next_token(db_dsn: str, run_worker: Any) -> None:
    """A rate of 2/s against a backlog: the worker's round trips stay a few per token (it waits
    for each token instead of polling), and the rate holds."""
    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.enqueue([{"i": i} for i in range(200)], queue=Q)
        store.ops.set_limit(Q, LimitSpec(rate=2.0, burst=1), actor="t", reason="slow")
        worker = run_worker(noop, queues=(Q,), concurrency=16, worker_id="w")
        wait_until(lambda: worker.ledger.stats.completed >= 2, what="first jobs")
        trips_before, done_before = worker.ledger.stats.trips, worker.ledger.stats.completed
        since = db_now(db_dsn)
        wait_until(lambda: db_now(db_dsn) >= since + timedelta(seconds=5), timeout=20, interval=0.2)
        trips = worker.ledger.stats.trips - trips_before
        done = worker.ledger.stats.completed - done_before
    print(f"\nrate 2/s for 5 s: {done} completed in {trips} round trips")
    # About two trips a token (the claim, then the completion riding the next claim); a worker
    # that polled would make hundreds.
    assert trips <= 4 * (done + 2)
    assert 8 <= done <= 12


class Claimers:
    """``n`` threads, each a worker's round trips of Q (complete the leases it holds, claim up
    to ``wanted``), each job taking ``job_s``; a throttled one waits its turn as a worker does.
    ``ledger``: each lease's life as its claimer saw it, from its claim's return to the sending
    of its completion (within its true life)."""

    def __init__(self, store: Stores, n: int, job_s: float, wanted: int) -> None:
        self.errors: list[BaseException] = []
        self.ledger: list[tuple[float, float]] = []
        self._ledger_lock = threading.Lock()
        self._stop = threading.Event()
        self._store, self._job_s, self._wanted = store, job_s, wanted
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(n)]
        for t in self._threads:
            t.start()

    def _run(self, i: int) -> None:
        held: list[tuple[Any, float]] = []
        try:
            while not self._stop.is_set():
                sent = time.monotonic()
                leases = [lease for lease, _ in held]
                trip = self._store.work.trip(
                    leases, Q, f"w{i}", TTL, self._wanted, take_expired=False
                )
                assert not trip.refused
                with self._ledger_lock:
                    self.ledger.extend((start, sent) for _, start in held)
                returned = time.monotonic()
                held = [(lease, returned) for lease in trip.leases]
                # The job "runs" (a handler's time); a throttled claimer waits its turn.
                self._stop.wait(self._job_s if held else (trip.throttle_wait or CAP_RECHECK_S))
        except BaseException as exc:  # (reported by stop)
            self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        assert not self.errors, self.errors


def lowered(store: Stores, spec: LimitSpec) -> bool:
    """Q's limit set to ``spec``: False when the shards' locks were busy past the wait."""
    try:
        store.ops.set_limit(Q, spec, actor="t", reason="lower")
    except LockBusy:
        return False
    return True


def test_a_cap_lowered_under_single_job_claimers_holds_once_their_leases_end(
    db_dsn: str,
) -> None:
    """16 single-job claimers at a cap of 12; the cap lowered to 4 (laid out over 4 shards
    instead of 8): once the leases claimed before the change have ended, no snapshot sees more
    than 4 live leases, and 4 are used."""
    with Stores.connect(db_dsn, "leasectl", max_size=24) as store:
        store.ops.enqueue([{"i": i} for i in range(20_000)], queue=Q)
        store.ops.set_limit(Q, LimitSpec(concurrency=12), actor="t", reason="start")
        claimers = Claimers(store, 16, 0.05, 1)

        def live() -> int:
            return store.ops.limits([Q])[0].live

        try:
            wait_until(lambda: live() == 12, what="the cap of 12 used")
            # (An operator's change waits at most 250 ms for the shards' locks and asks to be
            # tried again: a commit that stalls that long on this busy machine is not rare.)
            wait_until(
                lambda: lowered(store, LimitSpec(concurrency=4)), timeout=10, what="the change"
            )
            # Each lease claimed before the change ends within a job's time (0.05 s).
            wait_until(lambda: live() <= 4, timeout=10, what="the leases above 4 ended")
            sampler = Sampler(db_dsn)
            time.sleep(3)  # the sampling window (nothing to wait for)
            samples = sampler.stop()
        finally:
            claimers.stop()
    assert max(samples) == 4, max(samples)
