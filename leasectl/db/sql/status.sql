-- name: read_clock
-- The read clock of this transaction, set as leasectl.clock (epoch seconds) for the others' {now}.
-- On a primary: now(). On a hot standby: the commit time of the last transaction it replayed
-- (pg_last_xact_replay_timestamp(), a lower bound of what the data read describes) while it is
-- behind (it has received WAL it has not replayed, or replay is paused); caught up, now(). Its
-- lag: the standby's now() minus that (NULL on a primary). Reads only; allowed on a standby.
WITH s AS (
    SELECT pg_is_in_recovery() AS standby,
           CASE WHEN pg_is_in_recovery()
                THEN pg_is_wal_replay_paused()
                     OR pg_last_wal_receive_lsn() IS DISTINCT FROM pg_last_wal_replay_lsn()
                ELSE false END AS behind,
           pg_last_xact_replay_timestamp() AS replayed_at
), c AS (
    SELECT standby,
           CASE WHEN behind AND replayed_at IS NOT NULL THEN least(replayed_at, now())
                ELSE now() END AS clock
    FROM s
)
SELECT c.standby, c.clock, CASE WHEN c.standby THEN now() - c.clock END AS lag,
       set_config('leasectl.clock', extract(epoch FROM c.clock)::text, true) IS NOT NULL AS set
FROM c;

-- name: status_live_counts
-- Live counts per queue, each from its state's partial index, bounded as the metrics scrape's
-- are (leasectl/core/counts.py): Pending, due and Stuck counts stop at cap + 1 per queue, where
-- cap = greatest(floor, %(budget)s / queues) (%(stuck_floor)s for Stuck: status --check raises
-- it to its --max-stuck, so that a count above the cap still decides the check); "cap" is
-- returned with each row, a count above it reads as "at least cap". A loose index scan of the
-- claim index finds the (queue, priority) groups, at most %(group_limit)s (truncated: there were
-- more, found by one step past the limit); a queue's due count walks its groups' due run_at
-- ranges one after the other, cap + 1 entries in all; the oldest due is the oldest of its
-- groups' heads when that one is due. Processing is exact (the fleet's concurrency bounds it).
-- Waiting (behind a concurrency key) is bounded as Pending is.
WITH RECURSIVE grp AS (
    (SELECT 1 AS n, queue, priority
     FROM {schema}.jobs
     WHERE status = 'Pending' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
     ORDER BY queue, priority
     LIMIT 1)
    UNION ALL
    SELECT g.n + 1, nx.queue, nx.priority
    FROM grp AS g
    CROSS JOIN LATERAL (
        SELECT queue, priority
        FROM {schema}.jobs
        WHERE status = 'Pending' AND (queue, priority) > (g.queue, g.priority)
          AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
        ORDER BY queue, priority
        LIMIT 1
    ) AS nx
    WHERE g.n <= %(group_limit)s
), pcap AS (
    SELECT greatest(%(floor)s::bigint, %(budget)s::bigint / greatest(1, count(DISTINCT queue)))
               AS cap
    FROM grp
    WHERE n <= %(group_limit)s
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
), stuck_q AS (
    (SELECT queue
     FROM {schema}.jobs
     WHERE status = 'Stuck' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
     ORDER BY queue
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue
            FROM {schema}.jobs AS j
            WHERE j.status = 'Stuck' AND j.queue > s.queue
              AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
            ORDER BY j.queue
            LIMIT 1)
    FROM stuck_q AS s
    WHERE s.queue IS NOT NULL
), scap AS (
    SELECT greatest(%(stuck_floor)s::bigint, %(budget)s::bigint / greatest(1, count(queue)))
               AS cap
    FROM stuck_q
), waiting_q AS (
    -- The queues with Waiting jobs (behind their concurrency key, migration 18): a loose
    -- index scan of jobs_waiting_idx, whose first column is the queue.
    (SELECT queue
     FROM {schema}.jobs
     WHERE status = 'Waiting' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
     ORDER BY queue
     LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue
            FROM {schema}.jobs AS j
            WHERE j.status = 'Waiting' AND j.queue > w.queue
              AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
            ORDER BY j.queue
            LIMIT 1)
    FROM waiting_q AS w
    WHERE w.queue IS NOT NULL
), wcap AS (
    SELECT greatest(%(floor)s::bigint, %(budget)s::bigint / greatest(1, count(queue))) AS cap
    FROM waiting_q
)
SELECT p.queue, 'Pending' AS status,
       -- A queue the statistics sample too thinly (its estimate at most %(recount_cap)s) is
       -- counted again, exactly, up to that; the smallest first, %(recount_budget)s entries
       -- in all (core/counts.py). Counted below it: exact (the cap is then the recount's).
       CASE WHEN r.jobs <= %(recount_cap)s THEN r.jobs ELSE p.jobs END AS jobs,
       CASE WHEN r.jobs <= %(recount_cap)s THEN %(recount_cap)s::bigint ELSE p.cap END AS cap,
       CASE WHEN r.jobs <= %(recount_cap)s THEN rd.due ELSE p.due END AS due,
       p.oldest_due_at, 0::bigint AS expired, p.truncated,
       CASE WHEN r.jobs > %(recount_cap)s
            THEN greatest(p.estimate, %(recount_cap)s::bigint + 1) ELSE p.estimate END
           AS estimate,
       CASE WHEN r.jobs <= %(recount_cap)s THEN NULL ELSE p.due_estimate END AS due_estimate
FROM (
    SELECT q.queue, c.jobs, b.cap, d.due,
           CASE WHEN q.oldest <= {now} THEN q.oldest END AS oldest_due_at,
           (SELECT max(n) FROM grp) > %(group_limit)s AS truncated, e.estimate,
           -- Past the cap, the planner's estimates (migration 22): a plan each, never a scan.
           CASE WHEN d.due > b.cap
                THEN least(e.estimate, {schema}.estimate_jobs('Pending', q.queue, {now}))
           END AS due_estimate,
           CASE WHEN e.estimate <= %(recount_cap)s
                THEN sum(e.estimate) FILTER (WHERE e.estimate <= %(recount_cap)s)
                         OVER (ORDER BY e.estimate, q.queue) END AS recount_spent
    FROM heads AS q
    CROSS JOIN pcap AS b
    CROSS JOIN LATERAL (
        SELECT count(*) AS jobs
        FROM (SELECT 1
              FROM {schema}.jobs
              WHERE status = 'Pending' AND queue = q.queue
              LIMIT b.cap + 1) AS x
    ) AS c
    CROSS JOIN LATERAL (
        -- The queue's groups' due ranges one after the other, cap + 1 entries in all.
        SELECT count(*) AS due
        FROM (SELECT 1
              FROM grp AS g
              CROSS JOIN LATERAL (
                  SELECT 1
                  FROM {schema}.jobs
                  WHERE status = 'Pending' AND queue = g.queue AND priority = g.priority
                    AND run_at <= {now}
              ) AS r
              WHERE g.queue = q.queue AND g.n <= %(group_limit)s
              LIMIT b.cap + 1) AS x
    ) AS d
    CROSS JOIN LATERAL (
        SELECT CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Pending', q.queue) END
                   AS estimate
    ) AS e
) AS p
CROSS JOIN LATERAL (
    SELECT CASE WHEN p.recount_spent <= %(recount_budget)s
                THEN (SELECT count(*)
                      FROM (SELECT 1
                            FROM {schema}.jobs
                            WHERE status = 'Pending' AND queue = p.queue
                            LIMIT %(recount_cap)s::bigint + 1) AS x) END AS jobs
) AS r
CROSS JOIN LATERAL (
    -- Recounted below the recount's cap: at most that many Pending jobs, due or not, walked.
    SELECT CASE WHEN r.jobs <= %(recount_cap)s
                THEN (SELECT count(*)
                      FROM {schema}.jobs
                      WHERE status = 'Pending' AND queue = p.queue AND run_at <= {now}) END
               AS due
) AS rd
UNION ALL
SELECT queue, 'Processing', count(*), NULL, 0, NULL, count(*) FILTER (WHERE lease_until < {now}),
       false, NULL, NULL
FROM {schema}.jobs WHERE status = 'Processing'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue
UNION ALL
SELECT s.queue, 'Stuck', c.jobs, b.cap, 0, NULL, 0, false,
       CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Stuck', s.queue) END, NULL
FROM stuck_q AS s
CROSS JOIN scap AS b
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Stuck' AND queue = s.queue
          LIMIT b.cap + 1) AS x
) AS c
WHERE s.queue IS NOT NULL
UNION ALL
SELECT w.queue, 'Waiting', c.jobs, b.cap, 0, NULL, 0, false,
       CASE WHEN c.jobs > b.cap THEN {schema}.estimate_jobs('Waiting', w.queue) END, NULL
FROM waiting_q AS w
CROSS JOIN wcap AS b
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Waiting' AND queue = w.queue
          LIMIT b.cap + 1) AS x
) AS c
WHERE w.queue IS NOT NULL;

-- name: status_finished_recent
-- Exact Completed/Failed/Cancelled counts per queue over a recent window, from the finished_at index.
SELECT queue, status::text AS status, count(*) AS jobs
FROM {schema}.jobs
WHERE status IN ('Completed', 'Failed', 'Cancelled') AND finished_at >= {now} - %(window)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue, status;

-- name: status_finished_estimate
-- Estimated all-time Completed/Failed/Cancelled totals from planner statistics (exact would scan history).
SELECT v.status, round(c.reltuples * v.freq)::bigint AS jobs
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_stats AS s
  ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'status'
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs)
     AS v(status, freq)
WHERE n.nspname = %(schema)s AND c.relname = 'jobs' AND c.reltuples > 0
  AND v.status IN ('Completed', 'Failed', 'Cancelled');

-- name: status_owners
-- One row per lease owner or recently seen worker: leases held, freshness inputs, nearest expiry.
-- An owner that holds leases but fell out of the recent window still gets its declared intervals.
WITH held AS (
    SELECT lease_owner, count(*) AS held,
           count(*) FILTER (WHERE lease_until < {now}) AS expired,
           max(heartbeat_at) AS last_job_heartbeat_at, min(lease_until) AS next_expiry_at
    FROM {schema}.jobs
    WHERE status = 'Processing'
    GROUP BY lease_owner
), seen AS (
    SELECT * FROM {schema}.workers
    WHERE last_seen_at > {now} - %(window)s::interval
)
-- Values clamped and cut to what a workers row may hold since migration 15: an older row may
-- hold an interval no timedelta holds, or megabytes of text.
SELECT left(coalesce(w.worker_id, h.lease_owner), 400) AS owner,
       left(coalesce(w.hostname, o.hostname), 400) AS hostname, coalesce(w.pid, o.pid) AS pid,
       (SELECT array_agg(left(q, 200))
        FROM unnest((coalesce(w.queues, o.queues))[1:1000]) AS q) AS queues,
       least(greatest(coalesce(w.lease_ttl, o.lease_ttl), interval '0'), interval '3650 days')
           AS lease_ttl,
       least(greatest(coalesce(w.heartbeat_every, o.heartbeat_every), interval '0'),
             interval '3650 days') AS heartbeat_every,
       coalesce(w.started_at, o.started_at) AS started_at,
       coalesce(w.last_seen_at, o.last_seen_at) AS last_seen_at,
       coalesce(w.stopped_at, o.stopped_at) AS stopped_at,
       coalesce(h.held, 0) AS held, coalesce(h.expired, 0) AS expired,
       h.last_job_heartbeat_at, h.next_expiry_at
FROM seen AS w
FULL JOIN held AS h ON h.lease_owner = w.worker_id
LEFT JOIN {schema}.workers AS o ON w.worker_id IS NULL AND o.worker_id = h.lease_owner
ORDER BY coalesce(h.expired, 0) DESC, h.next_expiry_at NULLS LAST, owner
LIMIT %(limit)s;

-- name: status_limits
-- The limited queues (all, or the one named `queue`) for status, the console and the scrape: at most %(limits_limit)s by name, each row with how many there are (total), their limits in force at {now} (ramped) and their use: live leases counted through jobs_processing_idx (the queue's Processing set, bounded by the fleet), tokens refilled to {now}, throttled claims. queue_limits_list's columns.
-- The limits in force are queue_limit_now's (migration 17), written out here: a role that may
-- read the tables but was not granted EXECUTE on that function (SELECT on every table, by hand)
-- still reads status, the console and the metrics (test_limit_surfaces checks both agree).
SELECT l.queue, l.concurrency, l.rate, l.burst, l.ramp_from, l.ramp_until, l.set_at, l.set_by,
       l.reason, u.throttled, n.cap AS cap_now, n.rate AS rate_now, n.burst AS burst_now,
       CASE WHEN n.rate IS NOT NULL THEN u.tokens END AS tokens,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'Processing' AND j.queue = l.queue
          AND j.lease_until >= {now}) AS live,
       {now} AS db_now, count(*) OVER () AS total
FROM {schema}.queue_limits AS l
CROSS JOIN LATERAL (
    -- How far a ramp has come: 0 at ramp_from, 1 at ramp_until and after (or no ramp).
    SELECT CASE WHEN l.ramp_until IS NULL OR {now} >= l.ramp_until THEN 1.0::double precision
                WHEN {now} <= l.ramp_from THEN 0.0::double precision
                ELSE extract(epoch FROM {now} - l.ramp_from)::double precision
                     / extract(epoch FROM l.ramp_until - l.ramp_from)::double precision
           END AS f
) AS r
CROSS JOIN LATERAL (
    -- The floor a ramp rises from: 1 lease, min(rate, 1) a second, 1 token.
    SELECT CASE WHEN l.concurrency IS NOT NULL
                THEN greatest(1, ceil(l.concurrency * r.f))::integer END AS cap,
           CASE WHEN l.rate IS NOT NULL
                THEN least(l.rate, 1.0) + (l.rate - least(l.rate, 1.0)) * r.f END AS rate,
           CASE WHEN l.rate IS NOT NULL
                THEN greatest(1.0, coalesce(l.burst, greatest(1.0, l.rate)) * r.f) END AS burst
) AS n
CROSS JOIN LATERAL (
    -- Use summed over the shards (migration 24): each active shard's bucket refilled to {now}
    -- by its share of the burst in force (the shares written out as queue_limit_bucket_share).
    SELECT coalesce(sum(s.throttled), 0)::bigint AS throttled,
           sum(least(n.burst * w.part, s.tokens + n.rate * w.part * greatest(
               extract(epoch FROM {now} - s.tokens_at)::double precision, 0.0))) AS tokens
    FROM {schema}.queue_limit_shards AS s
    CROSS JOIN LATERAL (
        SELECT greatest(1, floor(coalesce(n.burst, 1)))::integer AS w,
               least(l.shards, greatest(1, floor(coalesce(n.burst, 1)))::integer) AS m
    ) AS c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN s.shard >= c.m THEN 0.0::double precision
                    ELSE (c.w / c.m + CASE WHEN s.shard < mod(c.w, c.m) THEN 1 ELSE 0 END)
                         ::double precision / c.w END AS part
    ) AS w
    WHERE s.queue = l.queue
) AS u
WHERE %(queue)s::text IS NULL OR l.queue = %(queue)s::text
ORDER BY l.queue
LIMIT %(limits_limit)s;
