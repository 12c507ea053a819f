"""Deterministic console data: a fixed database clock and fixed rows (snapshots, unit tests)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from leasectl.core.filters import ListedJob
from leasectl.core.models import (
    Attempt,
    ConsoleCounts,
    Event,
    Freshness,
    Job,
    JobDetail,
    JobStatus,
    OwnerHealth,
    PanelJob,
    Snapshot,
)

NOW = datetime(2024, 5, 14, 9, 30, 0, tzinfo=UTC)
HB = timedelta(seconds=10)
TTL = timedelta(seconds=30)

W1 = "pay-worker-1:4121:a1b2c3"
W2 = "pay-worker-2:4188:d4e5f6"
W3 = "pay-worker-3:5012:0f9e8d"
M1 = "mail-worker-1:777:aa11bb"
R1 = "report-worker:901:cc22dd"


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def job(
    id: int,
    status: JobStatus,
    *,
    queue: str = "payments",
    owner: str | None = None,
    lease_in: float | None = None,
    hb_ago: float | None = None,
    attempts: int = 1,
    max_attempts: int = 5,
    run_in: float = -60,
    error: str | None = None,
    priority: int = 0,
    lapsed_ago: float | None = None,
) -> PanelJob:
    lease_until = NOW + s(lease_in) if lease_in is not None else None
    return PanelJob(
        id=id,
        queue=queue,
        status=status,
        priority=priority,
        run_at=NOW + s(run_in),
        attempts=attempts,
        max_attempts=max_attempts,
        lease_owner=owner,
        lease_until=lease_until,
        heartbeat_at=NOW - s(hb_ago) if hb_ago is not None else None,
        last_error=error,
        created_at=NOW - s(3600),
        updated_at=NOW - s(30),
        risk_window=HB if status == JobStatus.PROCESSING else None,
        lapsed_at=NOW - s(lapsed_ago) if lapsed_ago is not None else lease_until,
    )


def owner(
    name: str,
    freshness: Freshness,
    *,
    seen_ago: float,
    held: int,
    expired: int = 0,
    next_in: float | None = None,
    queues: tuple[str, ...] = ("payments",),
    stopped: bool = False,
) -> OwnerHealth:
    host, pid, _ = name.split(":")
    return OwnerHealth(
        owner=name,
        hostname=host,
        pid=int(pid),
        queues=queues,
        lease_ttl=TTL,
        heartbeat_every=HB,
        started_at=NOW - s(7200),
        last_seen_at=NOW - s(seen_ago),
        stopped_at=NOW - s(seen_ago) if stopped else None,
        held=held,
        expired=expired,
        last_job_heartbeat_at=NOW - s(seen_ago),
        next_expiry_at=NOW + s(next_in) if next_in is not None else None,
        freshness=freshness,
    )


P, R, K = JobStatus.PENDING, JobStatus.PROCESSING, JobStatus.STUCK
EXPIRED_ERROR = "lease expired at 2024-05-14T09:15:48Z (owner pay-worker-3:5012:0f9e8d)"

PROCESSING = (
    job(1031, R, owner=W3, lease_in=-72, hb_ago=102, attempts=2),
    job(1036, R, owner=W3, lease_in=-40, hb_ago=70),
    job(1042, R, owner=W1, lease_in=-8, hb_ago=38, attempts=3),
    job(1050, R, owner=W2, lease_in=6, hb_ago=24),
    replace(job(1055, R, owner=W1, lease_in=21, hb_ago=9), progress=0.42),  # (ctx.progress)
    replace(job(1057, R, owner=M1, queue="emails", lease_in=24, hb_ago=6), progress=1.0),
    job(1058, R, owner=W1, lease_in=25, hb_ago=5),
    job(1061, R, owner=W2, lease_in=27, hb_ago=3, attempts=2),
    job(1063, R, owner=W1, lease_in=28, hb_ago=2),
)

STUCK = (
    replace(
        job(977, K, owner=W3, lease_in=-852, attempts=5, error=EXPIRED_ERROR),
        quarantined_by="watcher@ops-1:311",
        quarantine_reason="lease expired (watch --mark-stuck)",
        quarantined_at=NOW - s(820),
    ),
    replace(
        job(950, K, queue="reports", owner=R1, lease_in=-611, attempts=3, error="OOM killed"),
        quarantined_by="operator:alice",
        quarantine_reason="OOM on every attempt, INC-1234",
        quarantined_at=NOW - s(540),
    ),
    *(j for j in PROCESSING if j.lease_until is not None and j.lease_until < NOW),
)

PENDING = (
    job(1001, P, run_in=-252, priority=0),
    job(1002, P, run_in=-250, priority=0),
    job(1004, P, run_in=-241, priority=1, queue="emails"),
    job(1007, P, run_in=-230, priority=0),
    job(1012, P, run_in=-199, priority=0, attempts=1, error="timeout"),
    job(1016, P, run_in=-180, priority=2, queue="reports"),
    job(1020, P, run_in=-122, priority=0),
    job(988, P, run_in=42, attempts=2, error="gateway 503"),
    job(991, P, run_in=95, attempts=3, error="gateway 503"),
)

F = JobStatus.FAILED
FAILED = tuple(
    replace(job(i, F, queue=q, owner=o, attempts=5, error=e), finished_at=NOW - s(ago))
    for i, q, o, e, ago in (
        (
            1019,
            "payments",
            W1,
            "TimeoutError: card network timeout after 20s\nTraceback (most recent call last):",
            41,
        ),
        (1003, "payments", W2, "ValueError: invalid currency 'XBT' for order ord_77ab", 190),
        (
            996,
            "emails",
            M1,
            "smtplib.SMTPRecipientsRefused: {'ops@example.invalid': (550, b'5.1.1 no such "
            "user here, mailbox unavailable, check the address and try again')}",
            601,
        ),
        (940, "reports", R1, "killed by the OOM killer (exit 137)", 3720),
    )
)

OWNERS = (
    owner(W3, Freshness.SILENT, seen_ago=70, held=2, expired=2, next_in=-72),
    owner(W1, Freshness.FRESH, seen_ago=2, held=4, expired=1, next_in=-8),
    owner(W2, Freshness.LATE, seen_ago=24, held=2, next_in=6),
    owner(M1, Freshness.FRESH, seen_ago=6, held=1, next_in=24, queues=("emails",)),
    owner(R1, Freshness.STOPPED, seen_ago=900, held=0, queues=("reports",), stopped=True),
)

THROUGHPUT = (
    212, 220, 218, 225, 231, 228, 240, 236, 229, 233, 238, 241, 235, 230, 227,
    232, 229, 224, 219, 210, 181, 143, 97, 61, 40, 32, 28, 25, 22, 19,
)  # fmt: skip


def sample_snapshot() -> Snapshot:
    return Snapshot(
        db_now=NOW,
        server_version="16.3",
        database="payments",
        counts=ConsoleCounts(
            pending=1284,
            due=1270,
            oldest_due_at=NOW - s(252),
            processing=len(PROCESSING),
            at_risk=1,
            expired=3,
            stuck=2,
            completed_estimate=1_043_000,
            failed_estimate=5_210,
        ),
        throughput=THROUGHPUT,
        failed_recent=14,
        pending=PENDING,
        processing=PROCESSING,
        stuck=STUCK,
        owners=OWNERS,
        limit=100,
        risk_window=HB,
        failed=FAILED,
        failed_scan=5000,
    )


def listed(
    id: int,
    status: JobStatus,
    *,
    queue: str = "payments",
    error: str | None = None,
    payload: str = '{"order_id": "ord_1"}',
    ago: float = 60,
    owner: str | None = W1,
) -> ListedJob:
    finished = status in (JobStatus.COMPLETED, JobStatus.FAILED)
    return ListedJob(
        id=id,
        queue=queue,
        status=status,
        priority=0,
        attempts=5 if status == JobStatus.FAILED else 1,
        max_attempts=5,
        lease_owner=owner,
        last_error=error,
        last_error_chars=len(error) if error is not None else None,
        payload_text=payload,
        payload_chars=len(payload),
        run_at=NOW - s(ago + 10),
        created_at=NOW - s(ago + 10),
        updated_at=NOW - s(ago),
        finished_at=NOW - s(ago) if finished else None,
    )


def sample_found(n: int = 120) -> tuple[ListedJob, ...]:
    """What the find screen finds in the sample: ``n`` jobs, ids 2000 down, every fifth
    Failed (the others Completed), two queues."""
    return tuple(
        listed(
            2000 - k,
            JobStatus.FAILED if k % 5 == 0 else JobStatus.COMPLETED,
            queue="payments" if k % 3 else "emails",
            error="TimeoutError: card network timeout after 20s" if k % 5 == 0 else None,
            payload=f'{{"invoice": {4200 + k}, "currency": "EUR"}}',
            ago=30 + 45 * k,
        )
        for k in range(n)
    )


def sample_detail(job_id: int = 1042) -> JobDetail:
    the_job = Job(
        id=job_id,
        queue="payments",
        payload={
            "order_id": "ord_8f2k1x",
            "amount_cents": 129900,
            "currency": "EUR",
            "customer": {"id": "cus_4471", "country": "DE"},
            "idempotency_key": "pay-ord_8f2k1x-3",
        },
        status=JobStatus.PROCESSING,
        priority=0,
        run_at=NOW - s(400),
        attempts=3,
        max_attempts=5,
        lease_owner=W1,
        lease_until=NOW - s(8),
        heartbeat_at=NOW - s(38),
        last_error="card network timeout after 20s",
        created_at=NOW - s(3600),
        updated_at=NOW - s(38),
        finished_at=None,
    )
    attempts = (
        Attempt(job_id, 1, W3, NOW - s(1900), NOW - s(1870), NOW - s(1840), "expired", None),
        Attempt(
            job_id,
            2,
            W2,
            NOW - s(700),
            NOW - s(690),
            NOW - s(668),
            "failed",
            "card network timeout after 20s",
        ),
        Attempt(job_id, 3, W1, NOW - s(68), NOW - s(38), None, "running", None),
    )
    events = (
        Event(
            1,
            job_id,
            NOW - s(1840),
            "watcher@ops-1:311",
            "requeue",
            "lease expired",
            {"status": "Processing", "attempts": 1, "lease_owner": W3},
            {"status": "Pending", "attempts": 1},
        ),
    )
    return JobDetail(the_job, attempts, events, NOW, unique_key="pay-ord_8f2k1x")
