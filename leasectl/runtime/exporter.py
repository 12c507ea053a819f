"""The Prometheus exporter (``leasectl metrics``): a collector that reads the database for the
scrapes (``db/metrics.py`` through ``runtime/scrapes.py``) and names what it read in
Prometheus' terms; the HTTP server is ``runtime/exporter_server.py``.

A scrape that cannot reach the database, or does not hear from it within ``--timeout``, still
answers: ``leasectl_up 0`` and the error's class; the next read connects afresh (one connection
attempt per read, not the pool's growing backoff), so the exporter recovers at the first scrape
after the database is back. Concurrent scrapes share one read, and a read answers the scrapes
of the next second too (``scrapes.CACHE_FOR``).

Label values are data written by producers and workers: control characters (C0, DEL, C1), bidi
and other format characters come out as visible escapes (``\\x1b``, ``\\u202e``, as the CLI
shows them, ``core/literal.py``) and a backslash is doubled, so that distinct values stay
distinct and ``curl /metrics`` in a terminal prints text, never commands to the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leasectl.core.actions import AUDIT_ACTIONS
from leasectl.core.literal import visible
from leasectl.core.models import Freshness, JobStatus
from leasectl.core.statuses import ESTIMATED, named
from leasectl.db.metrics import MetricsReads, MetricsRows
from leasectl.runtime.scrapes import SharedReads

# Every metric this exporter can emit: name -> (type, labels, help). README's "Metrics" section
# lists the same; tests check both against a real scrape.
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "leasectl_up": ("gauge", (), "1 when the last scrape read the database, else 0."),
    "leasectl_scrape_error_info": (
        "gauge",
        ("error",),
        "1 for the class of the error that made the last scrape fail (only when leasectl_up is 0).",
    ),
    "leasectl_scrape_duration_seconds": (
        "gauge",
        (),
        "How long the last scrape's reads took, in seconds.",
    ),
    "leasectl_scrape_truncated": (
        "gauge",
        ("part",),
        "1 when a read stopped at its limit of queues, owners or rows: its gauges miss some.",
    ),
    "leasectl_jobs": (
        "gauge",
        ("queue", "status"),
        "Live jobs per queue and status (Pending, Processing, Stuck, Waiting: behind their "
        "concurrency key). Processing is exact; Pending, Stuck and Waiting are exact up to a cap "
        "per queue, then the cap (see leasectl_jobs_capped).",
    ),
    "leasectl_jobs_capped": (
        "gauge",
        ("queue", "status"),
        "1 when leasectl_jobs for this queue and status stopped at the count cap: there are more.",
    ),
    "leasectl_jobs_estimate": (
        "gauge",
        ("queue", "status"),
        "Past the count cap (leasectl_jobs_capped 1): the planner's estimate of that queue's "
        "jobs in that status, from statistics on (queue, status); only while capped.",
    ),
    "leasectl_jobs_finished_estimate": (
        "gauge",
        ("status",),
        f"Finished jobs ({named(ESTIMATED, ', ')}) in the table, all queues: the planner's "
        "estimate from table statistics, never an exact count.",
    ),
    "leasectl_oldest_due_job_age_seconds": (
        "gauge",
        ("queue",),
        "Seconds since the oldest due Pending job of the queue became due (0: none is due).",
    ),
    "leasectl_leases_expired": (
        "gauge",
        ("queue", "owner"),
        "Processing jobs whose lease has expired, per queue and lease owner.",
    ),
    "leasectl_leases_at_risk": (
        "gauge",
        ("queue", "owner"),
        "Processing jobs whose lease ends within the owner's heartbeat interval, "
        "per queue and lease owner.",
    ),
    "leasectl_owners": (
        "gauge",
        ("freshness",),
        "Lease owners and recently seen workers by freshness "
        "(fresh, late, silent, stopped, unknown).",
    ),
    "leasectl_owner_leases": (
        "gauge",
        ("owner", "freshness"),
        "Leases an owner holds (its Processing jobs), with its freshness.",
    ),
    "leasectl_owner_leases_expired": (
        "gauge",
        ("owner", "freshness"),
        "Expired leases an owner holds, with its freshness.",
    ),
    "leasectl_queue_paused": ("gauge", ("queue",), "1 for each paused queue."),
    # Flow control (migration 17): each limited queue's limits in force now (a ramp applied).
    "leasectl_queue_concurrency_limit": (
        "gauge",
        ("queue",),
        "The live leases a limited queue may hold now (its cap, ramped), for queues with a cap.",
    ),
    "leasectl_queue_rate_limit": (
        "gauge",
        ("queue",),
        "The starts per second a limited queue may make now (its rate, ramped), for queues "
        "with a rate.",
    ),
    # Schedules (migration 19).
    "leasectl_schedule_last_enqueue_timestamp_seconds": (
        "gauge",
        ("schedule",),
        "When a schedule last enqueued a job (a slot or `schedule run`), in seconds since the "
        "epoch; no series before its first.",
    ),
    "leasectl_schedule_lateness_seconds": (
        "gauge",
        ("schedule",),
        "How far a schedule's next slot is behind the database's clock: 0 on time (or paused); "
        "growing while no `leasectl watch` enqueues it.",
    ),
    # The history (migration 20): over the current and the previous minute, so that a scrape
    # early in a minute still has the last one's starts.
    "leasectl_pickup_latency_seconds": (
        "gauge",
        ("queue", "quantile"),
        "Pickup latency (an attempt's start minus when its job became due) over the current "
        "and the previous minute, per queue, at quantile 0.5 and 0.95 (from a log-scale "
        "histogram: within one bucket, a factor of 1.41); no series for a queue that started none.",
    ),
    # Counters (migration 11): kept by the database's triggers, so every exporter of one
    # database reports the same values, and prune or delete never lowers them.
    "leasectl_jobs_completed_total": (
        "counter",
        ("queue",),
        "Attempts that ended completed (jobs completed), per queue.",
    ),
    "leasectl_attempts_failed_total": (
        "counter",
        ("queue",),
        "Attempts that ended failed, retried or final, per queue.",
    ),
    "leasectl_job_retries_total": (
        "counter",
        ("queue",),
        "Failed attempts that sent their job back to Pending for a retry, per queue.",
    ),
    "leasectl_watcher_actions_total": (
        "counter",
        ("queue", "action"),
        "Expired leases the watcher moved (watch, requeue-stuck), per queue and action "
        "(requeue, mark_stuck, fail).",
    ),
    "leasectl_operator_actions_total": (
        "counter",
        ("queue", "action"),
        f"Operator actions per queue and action ({', '.join(AUDIT_ACTIONS)}: one per job; "
        "pause, resume: one per queue).",
    ),
    "leasectl_queue_throttled_claims_total": (
        "counter",
        ("queue",),
        "Claims of a limited queue that its cap or rate cut short, since its limits were set "
        "(kept in the shards of its limits: clearing the limits resets it).",
    ),
}

# Which counter of the database each counter metric reports (db/metrics.py's CounterValue).
COUNTERS: dict[str, str] = {
    "completed": "leasectl_jobs_completed_total",
    "failed": "leasectl_attempts_failed_total",
    "retried": "leasectl_job_retries_total",
    "watcher": "leasectl_watcher_actions_total",
    "operator": "leasectl_operator_actions_total",
}

# Seconds between two folds of the counters' deltas (LeasectlCollector.fold).
FOLD_EVERY = 1.0


def _gauge(name: str) -> GaugeMetricFamily:
    _, labels, doc = METRICS[name]
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _counter(name: str) -> CounterMetricFamily:
    _, labels, doc = METRICS[name]
    return CounterMetricFamily(name, doc, labels=list(labels))


def _family(name: str) -> Metric:
    return _counter(name) if METRICS[name][0] == "counter" else _gauge(name)


def label(value: str) -> str:
    """A label value safe to print: every control, format and separator character escaped as
    the CLI shows it, and a backslash doubled first (so that no two values become one)."""
    if value.isascii() and value.isprintable() and "\\" not in value:
        return value
    return visible(value.replace("\\", "\\\\"))


class LeasectlCollector(Collector):
    """Reads the database for the scrapes; never raises out of ``collect``, never waits for
    the database longer than ``timeout``."""

    def __init__(
        self,
        reads: MetricsReads | None,
        timeout: timedelta,
        connect: Callable[[], MetricsReads],
    ) -> None:
        """``reads``: over an open database (None: connect at the first scrape); ``connect``:
        a new one, after a scrape that lost the database."""
        self.shared = SharedReads(reads, timeout, connect)

    def close(self) -> None:
        self.shared.close()

    def fold(self) -> None:
        """Start a fold of the counters' deltas if the exporter's role may fold (``leasectl
        metrics`` asks every FOLD_EVERY seconds, between scrapes): a scrape then reads the
        deltas of about a second. Never waits; a failure is logged once."""
        self.shared.fold()

    def describe(self) -> Iterator[Metric]:
        # No reads at registration: the registry learns the names from this, not from collect().
        for name in METRICS:
            yield _family(name)

    def collect(self) -> Iterator[Metric]:
        outcome = self.shared.read()
        up = _gauge("leasectl_up")
        up.add_metric([], 0 if outcome.rows is None else 1)
        yield up
        if outcome.error is not None:
            info = _gauge("leasectl_scrape_error_info")
            info.add_metric([outcome.error], 1)
            yield info
        duration = _gauge("leasectl_scrape_duration_seconds")
        duration.add_metric([], outcome.took)
        yield duration
        if outcome.rows is not None:
            yield from families(outcome.rows)


def families(rows: MetricsRows) -> Iterator[Metric]:
    """The gauges of one scrape's rows."""
    truncated = _gauge("leasectl_scrape_truncated")
    parts = ("pending", "stuck", "waiting", "leases", "owners", "paused", "counters", "limits",
             "schedules")  # fmt: skip
    for part in (*parts, "pickup"):
        truncated.add_metric([part], 1 if part in rows.truncated else 0)
    yield truncated

    jobs, capped = _gauge("leasectl_jobs"), _gauge("leasectl_jobs_capped")
    estimate = _gauge("leasectl_jobs_estimate")
    oldest = _gauge("leasectl_oldest_due_job_age_seconds")
    for p in rows.pending:
        jobs.add_metric([label(p.queue), JobStatus.PENDING], p.jobs.value)
        capped.add_metric([label(p.queue), JobStatus.PENDING], int(p.jobs.capped))
        if p.jobs.estimated:
            estimate.add_metric([label(p.queue), JobStatus.PENDING], p.jobs.shown)
        oldest.add_metric([label(p.queue)], p.oldest_due_age or 0.0)
    processing: dict[str, int] = {}
    for lease in rows.leases:
        processing[lease.queue] = processing.get(lease.queue, 0) + lease.processing
    for queue in sorted(processing):
        jobs.add_metric([label(queue), JobStatus.PROCESSING], processing[queue])
    for queue, stuck in sorted(rows.stuck.items()):
        jobs.add_metric([label(queue), JobStatus.STUCK], stuck.value)
        capped.add_metric([label(queue), JobStatus.STUCK], int(stuck.capped))
        if stuck.estimated:
            estimate.add_metric([label(queue), JobStatus.STUCK], stuck.shown)
    for queue, waiting in sorted(rows.waiting.items()):
        jobs.add_metric([label(queue), JobStatus.WAITING], waiting.value)
        capped.add_metric([label(queue), JobStatus.WAITING], int(waiting.capped))
        if waiting.estimated:
            estimate.add_metric([label(queue), JobStatus.WAITING], waiting.shown)
    yield jobs
    yield capped
    yield estimate
    yield oldest

    finished = _gauge("leasectl_jobs_finished_estimate")
    for status in ESTIMATED:
        # No statistics yet (a new table): 0 rather than no series, as status shows.
        finished.add_metric([status], rows.finished_estimate.get(status, 0))
    yield finished

    expired, at_risk = _gauge("leasectl_leases_expired"), _gauge("leasectl_leases_at_risk")
    for lease in rows.leases:
        expired.add_metric([label(lease.queue), label(lease.owner)], lease.expired)
        at_risk.add_metric([label(lease.queue), label(lease.owner)], lease.at_risk)
    yield expired
    yield at_risk

    owners = _gauge("leasectl_owners")
    held, held_expired = _gauge("leasectl_owner_leases"), _gauge("leasectl_owner_leases_expired")
    by_freshness = dict.fromkeys(Freshness, 0)
    for owner in rows.owners:
        by_freshness[owner.freshness] += 1
        held.add_metric([label(owner.owner), owner.freshness], owner.held)
        held_expired.add_metric([label(owner.owner), owner.freshness], owner.expired)
    for freshness, owned in by_freshness.items():
        owners.add_metric([freshness], owned)
    yield owners
    yield held
    yield held_expired

    paused = _gauge("leasectl_queue_paused")
    for state in rows.paused:
        paused.add_metric([label(state.queue)], 1)
    yield paused

    cap, rate = _gauge("leasectl_queue_concurrency_limit"), _gauge("leasectl_queue_rate_limit")
    throttled = _counter("leasectl_queue_throttled_claims_total")
    for lim in rows.limits:
        if lim.cap_now is not None:
            cap.add_metric([label(lim.queue)], lim.cap_now)
        if lim.rate_now is not None:
            rate.add_metric([label(lim.queue)], lim.rate_now)
        throttled.add_metric([label(lim.queue)], lim.throttled)
    yield cap
    yield rate
    yield throttled

    last, late = (
        _gauge("leasectl_schedule_last_enqueue_timestamp_seconds"),
        _gauge("leasectl_schedule_lateness_seconds"),
    )
    for sched in rows.schedules:
        if sched.last_enqueued_at is not None:
            last.add_metric([label(sched.name)], sched.last_enqueued_at.timestamp())
        late.add_metric([label(sched.name)], sched.lateness)
    yield last
    yield late
    pickup = _gauge("leasectl_pickup_latency_seconds")
    for latency in rows.pickup:
        for quantile, ms in (("0.5", latency.p50_ms), ("0.95", latency.p95_ms)):
            if ms is not None:
                pickup.add_metric([label(latency.queue), quantile], ms / 1000)
    yield pickup

    counters = {name: _counter(name) for name in COUNTERS.values()}
    for c in rows.counters:
        name = COUNTERS.get(c.counter)
        if name is None:  # a counter of a newer leasectl's schema
            continue
        labels = [label(c.queue), label(c.action)][: len(METRICS[name][1])]
        counters[name].add_metric(labels, c.value)
    yield from counters.values()
