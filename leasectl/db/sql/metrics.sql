-- The metrics exporter's scrape (leasectl metrics): run together in one read-only REPEATABLE READ
-- transaction with the console's settings (console_snapshot_begin, console_settings), so that
-- every gauge describes the same instant. Each query walks a live state's partial index, a bounded
-- number of steps; none reads finished history (its totals are the planner's estimate,
-- status_finished_estimate). Counts of Pending and Stuck rows stop at cap + 1 per queue, where
-- cap = greatest(%(floor)s, %(budget)s / queues): the queues share a budget of index entries
-- (leasectl/core/counts.py: cap_for, and "more than cap" read as a lower bound).

-- name: metrics_pending
-- Per queue with Pending jobs: how many (at most cap + 1 counted, cap returned) and the age in
-- seconds of the oldest due one (NULL: none is due). A loose index scan of the claim index finds the (queue,
-- priority) groups, at most %(group_limit)s of them (truncated: there were more, found by one
-- step past the limit); the head of a
-- group in run_at order is its oldest, so the oldest due of a queue is the oldest of its groups'
-- heads when that one is due. The database clock decides.
WITH RECURSIVE grp AS (
    (SELECT 1 AS n, queue, priority
     FROM {schema}.jobs
     WHERE status = 'Pending'
     ORDER BY queue, priority
     LIMIT 1)
    UNION ALL
    SELECT g.n + 1, nx.queue, nx.priority
    FROM grp AS g
    CROSS JOIN LATERAL (
        SELECT queue, priority
        FROM {schema}.jobs
        WHERE status = 'Pending' AND (queue, priority) > (g.queue, g.priority)
        ORDER BY queue, priority
        LIMIT 1
    ) AS nx
    WHERE g.n <= %(group_limit)s
), heads AS (
    SELECT g.queue, min(h.run_at) AS oldest
    FROM grp AS g
    CROSS JOIN LATERAL (
        SELECT run_at
        FROM {schema}.jobs
        WHERE status = 'Pending' AND queue = g.queue AND priority = g.priority
        ORDER BY run_at
        LIMIT 1
    ) AS h
    WHERE g.n <= %(group_limit)s
    GROUP BY g.queue
), budget AS (
    SELECT greatest(%(floor)s::bigint, %(budget)s::bigint / greatest(1, count(*))) AS cap
    FROM heads
), counted AS (
    SELECT q.queue, c.jobs, b.cap,
           CASE WHEN q.oldest <= now()
                THEN extract(epoch FROM now() - q.oldest)::float8 END AS oldest_due_age,
           (SELECT max(n) FROM grp) > %(group_limit)s AS truncated,
           -- Past the cap, the planner's estimate (migration 22): a plan, never a scan.
           CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Pending', q.queue) END
               AS estimate
    FROM heads AS q
    CROSS JOIN budget AS b
    CROSS JOIN LATERAL (
        SELECT count(*) AS jobs
        FROM (SELECT 1
              FROM {schema}.jobs
              WHERE status = 'Pending' AND queue = q.queue
              LIMIT b.cap + 1) AS x
    ) AS c
), recounted AS (
    -- The queues estimated at most %(recount_cap)s counted again, exactly, the smallest first,
    -- within %(recount_budget)s entries (migration 29's pending_recount, the rule `status` and
    -- the console follow: core/counts.py).
    SELECT r.recount_queue, r.recounted
    FROM (SELECT array_agg(queue ORDER BY queue) AS queues,
                 array_agg(estimate ORDER BY queue) AS estimates
          FROM counted
          WHERE estimate IS NOT NULL) AS e
    CROSS JOIN LATERAL {schema}.pending_recount(
        e.queues, e.estimates, NULL, %(recount_cap)s::bigint, %(recount_budget)s::bigint) AS r
)
SELECT c.queue, c.jobs, c.cap, c.oldest_due_age, c.truncated, c.estimate, r.recounted
FROM counted AS c
LEFT JOIN recounted AS r ON r.recount_queue = c.queue
ORDER BY c.queue;

-- name: metrics_stuck
-- Per queue with Stuck jobs: how many (at most cap + 1 counted, cap returned). A loose index scan
-- of the Stuck index finds the queues, at most %(queue_limit)s of them (truncated: there were more, found
-- by one step past the limit).
WITH RECURSIVE q AS (
    (SELECT 1 AS n, queue
     FROM {schema}.jobs
     WHERE status = 'Stuck'
     ORDER BY queue
     LIMIT 1)
    UNION ALL
    SELECT q.n + 1, nx.queue
    FROM q
    CROSS JOIN LATERAL (
        SELECT queue
        FROM {schema}.jobs
        WHERE status = 'Stuck' AND queue > q.queue
        ORDER BY queue
        LIMIT 1
    ) AS nx
    WHERE q.n <= %(queue_limit)s
), budget AS (
    SELECT greatest(%(floor)s::bigint, %(budget)s::bigint / greatest(1, count(*))) AS cap
    FROM q
    WHERE q.n <= %(queue_limit)s
)
SELECT q.queue, c.jobs, b.cap, (SELECT max(n) FROM q) > %(queue_limit)s AS truncated,
       CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Stuck', q.queue) END AS estimate
FROM q
CROSS JOIN budget AS b
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Stuck' AND queue = q.queue
          LIMIT b.cap + 1) AS x
) AS c
WHERE q.n <= %(queue_limit)s
ORDER BY q.queue;

-- name: metrics_waiting
-- Per queue with Waiting jobs (behind their concurrency key, migration 18): how many (at most
-- cap + 1 counted, cap returned), as metrics_stuck counts Stuck ones. A loose index scan of
-- jobs_waiting_idx (queue first) finds the queues, at most %(queue_limit)s of them (truncated:
-- there were more, found by one step past the limit).
WITH RECURSIVE q AS (
    (SELECT 1 AS n, queue
     FROM {schema}.jobs
     WHERE status = 'Waiting'
     ORDER BY queue
     LIMIT 1)
    UNION ALL
    SELECT q.n + 1, nx.queue
    FROM q
    CROSS JOIN LATERAL (
        SELECT queue
        FROM {schema}.jobs
        WHERE status = 'Waiting' AND queue > q.queue
        ORDER BY queue
        LIMIT 1
    ) AS nx
    WHERE q.n <= %(queue_limit)s
), budget AS (
    SELECT greatest(%(floor)s::bigint, %(budget)s::bigint / greatest(1, count(*))) AS cap
    FROM q
    WHERE q.n <= %(queue_limit)s
)
SELECT q.queue, c.jobs, b.cap, (SELECT max(n) FROM q) > %(queue_limit)s AS truncated,
       CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Waiting', q.queue) END AS estimate
FROM q
CROSS JOIN budget AS b
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Waiting' AND queue = q.queue
          LIMIT b.cap + 1) AS x
) AS c
WHERE q.n <= %(queue_limit)s
ORDER BY q.queue;

-- name: metrics_leases
-- Per queue and lease owner: Processing jobs, expired leases (lease_until before now()) and leases
-- at risk (ending within the owner's heartbeat interval, %(risk_window)s when it declared none),
-- exact: the Processing set is bounded by the fleet's concurrency. As in console_counts, the
-- owner's interval is looked up only for the leases ending within the longest interval any
-- worker declared. At most %(lease_limit)s (queue, owner) rows, most expired first.
SELECT j.queue, j.lease_owner AS owner, count(*) AS processing,
       count(*) FILTER (WHERE j.lease_until < now()) AS expired,
       count(*) FILTER (
           WHERE j.lease_until >= now()
             AND j.lease_until < now() + (
                 -- (Clamped as migration 15 bounds them: an older row's may overflow the sum.)
                 SELECT greatest(least(max(heartbeat_every), interval '3650 days'),
                                 %(risk_window)s::interval)
                 FROM {schema}.workers)
             AND j.lease_until < now() + coalesce(
                 (SELECT least(greatest(w.heartbeat_every, interval '0'), interval '3650 days')
                  FROM {schema}.workers AS w
                  WHERE w.worker_id = j.lease_owner),
                 %(risk_window)s::interval)
       ) AS at_risk
FROM {schema}.jobs AS j
WHERE j.status = 'Processing'
GROUP BY j.queue, j.lease_owner
ORDER BY expired DESC, j.queue, j.lease_owner
LIMIT %(lease_limit)s;

-- name: metrics_clock
-- The database clock of the scrape (every age above is measured on it).
SELECT now() AS db_now;

-- name: metrics_counters_fold
-- Fold up to %(fold_limit)s counter deltas into their totals (counters_fold, migrations 11 and
-- 16: it skips what another transaction holds): `watch` runs it after each pass and an exporter
-- whose role may (an operator's) every second, so that a scrape reads few deltas.
SELECT {schema}.counters_fold(%(fold_limit)s) AS folded;

-- name: counters_may_fold
-- Whether the session's role may run counters_fold (migration 16 took it from viewers).
SELECT coalesce(bool_or(has_function_privilege(p.oid, 'EXECUTE')), false) AS may_fold
FROM pg_catalog.pg_proc AS p
WHERE p.proname = 'counters_fold'
  AND p.pronamespace = (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = %(schema)s);

-- name: metrics_counters
-- Every counter (migration 11): its total plus the deltas not folded yet, read in the scrape's
-- snapshot, so that each delta is counted once (a fold moves it in one statement): the
-- operator's and the watcher's in counter_deltas, the attempts' outcomes (completed, failed,
-- retried) in the history's deltas since migration 27 (history_fold adds them to the totals).
-- At most %(counter_limit)s + 1 series per counter, in key order (more: that counter is
-- truncated), so that many series of one counter never push another counter out of the scrape.
SELECT r.counter, r.action, r.queue, r.value
FROM (
    SELECT c.counter, c.action, c.queue, sum(c.value)::bigint AS value,
           row_number() OVER (PARTITION BY c.counter ORDER BY c.action, c.queue) AS n
    FROM (
        SELECT counter, action, queue, value FROM {schema}.counter_totals
        UNION ALL
        SELECT counter, action, queue, delta FROM {schema}.counter_deltas
        UNION ALL
        SELECT counter, '', queue, delta FROM {schema}.queue_history_deltas
        WHERE counter IN ('completed', 'failed', 'retried')
    ) AS c
    GROUP BY c.counter, c.action, c.queue
) AS r
WHERE r.n <= %(counter_limit)s + 1
ORDER BY r.counter, r.action, r.queue;

-- name: metrics_schedules
-- The schedules for the scrape, by name (at most `schedules_limit`, each row with how many there are): when each last enqueued a job, and how far its next slot is behind {now} (0 while paused or not due).
SELECT s.name, s.last_enqueued_at,
       CASE WHEN s.paused_at IS NULL
            THEN greatest(extract(epoch FROM {now} - s.next_slot)::double precision, 0.0)
            ELSE 0.0::double precision END AS lateness,
       count(*) OVER () AS total
FROM {schema}.schedules AS s
ORDER BY s.name
LIMIT %(schedules_limit)s;
