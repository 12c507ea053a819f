-- The console's refresh: run together in one read-only REPEATABLE READ transaction, so that every
-- count, every panel row and the read clock describe the same instant. Each query reads the live
-- rows through their partial index and never scans finished history.
--
-- {now} is the read clock (leasectl/db/sql/__init__.py): the reference time read_clock sets for
-- the transaction (now() on a primary; on a hot standby behind its primary, the time of the last
-- transaction it replayed), so that "expired", "due" and the countdowns are as of the data read.
--
-- Filters shared by the panels: %(queue)s exact queue, %(owner)s prefix of lease_owner (for
-- Pending and Stuck jobs, the owner of the last lease), %(job_id)s one job.

-- name: console_snapshot_begin
-- Start the console's snapshot transaction: one MVCC snapshot and one read clock for every query.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: console_settings
-- The refresh transaction's settings: %(setting_names)s = %(setting_values)s, pairwise. They are
-- queries.CONSOLE_SETTINGS (generic plans, index paths only, no JIT) and a statement_timeout
-- that bounds every console query, so that a refresh never hangs on a sick server.
SELECT set_config(s.name, s.value, true)
FROM unnest(%(setting_names)s::text[], %(setting_values)s::text[]) AS s(name, value);

-- name: console_counts
-- Live counts (each from its partial index), oldest due Pending, at-risk and expired leases,
-- and the server's clock and version. Pending, due, Stuck and Waiting counts are bounded as the metrics
-- scrape's are (leasectl/core/counts.py): they stop at %(budget)s + 1 index entries, and the
-- statement returns %(budget)s as "cap" (a count above it reads as "at least cap"). Processing,
-- expired and at risk are exact: the fleet's concurrency bounds them, and the console acts on
-- the expired leases. Due counts and the oldest due come from the claim index's (queue,
-- priority) groups, found by a loose index scan (at most %(group_limit)s): a group's due rows
-- are a run_at range (at most cap + 1 entries counted in all), its head its oldest; past the
-- limit (truncated) the due rows and the oldest are read from the whole Pending index instead.
-- At risk: the lease ends within the owner's heartbeat interval (%(risk_window)s when unknown).
-- The owner's interval is looked up only for the leases ending within the longest interval
-- any worker declared, not joined to every Processing row.
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
), heads AS (
    SELECT min(h.run_at) AS oldest,
           coalesce((SELECT max(n) FROM grp) > %(group_limit)s, false) AS truncated
    FROM grp AS g
    CROSS JOIN LATERAL (
        SELECT run_at
        FROM {schema}.jobs
        WHERE status = 'Pending' AND queue = g.queue AND priority = g.priority
        ORDER BY run_at
        LIMIT 1
    ) AS h
    WHERE g.n <= %(group_limit)s
), due AS (
    -- The groups' due ranges one after the other, cap + 1 entries in all.
    SELECT count(*) AS due
    FROM (SELECT 1
          FROM grp AS g
          CROSS JOIN LATERAL (
              SELECT 1
              FROM {schema}.jobs
              WHERE status = 'Pending' AND queue = g.queue AND priority = g.priority
                AND run_at <= {now}
          ) AS d
          WHERE g.n <= %(group_limit)s
          LIMIT %(budget)s::bigint + 1) AS x
), p AS (
    SELECT (SELECT count(*)
            FROM (SELECT 1
                  FROM {schema}.jobs
                  WHERE status = 'Pending'
                    AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
                  LIMIT %(budget)s::bigint + 1) AS x) AS pending,
           CASE WHEN NOT h.truncated THEN (SELECT due FROM due)
                ELSE (SELECT count(*)
                      FROM (SELECT 1
                            FROM {schema}.jobs
                            WHERE status = 'Pending' AND run_at <= {now}
                              AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
                            LIMIT %(budget)s::bigint + 1) AS x) END AS due,
           CASE WHEN NOT h.truncated THEN h.oldest
                ELSE (SELECT min(run_at)
                      FROM {schema}.jobs
                      WHERE status = 'Pending'
                        AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)) END AS oldest
    FROM heads AS h
)
SELECT {now} AS db_now, current_setting('server_version') AS server_version,
       current_database() AS database, p.pending, coalesce(p.due, 0) AS due,
       CASE WHEN p.oldest <= {now} THEN p.oldest END AS oldest_due_at,
       %(budget)s::bigint AS cap,
       r.processing, r.expired, r.at_risk, s.stuck, w.waiting,
       -- Past the cap, the planner's estimates (migration 22): a plan each, never a scan;
       -- one at most %(recount_cap)s counted again, exactly (migration 29's pending_recount,
       -- the rule `status` and the metrics scrape follow: core/counts.py).
       pe.pending_estimate, rc.recounted AS pending_recounted, rc.recounted_due AS due_recounted,
       CASE WHEN p.due > %(budget)s::bigint
            THEN {schema}.estimate_jobs('Pending', %(queue)s::text, {now}) END AS due_estimate,
       CASE WHEN s.stuck > %(budget)s::bigint
            THEN {schema}.estimate_jobs('Stuck', %(queue)s::text) END AS stuck_estimate,
       CASE WHEN w.waiting > %(budget)s::bigint
            THEN {schema}.estimate_jobs('Waiting', %(queue)s::text) END AS waiting_estimate
FROM p
CROSS JOIN (
    SELECT count(*) AS processing,
           count(*) FILTER (WHERE j.lease_until < {now}) AS expired,
           count(*) FILTER (
               WHERE j.lease_until >= {now}
                 AND j.lease_until < {now} + (
                     -- (Clamped as migration 15 bounds them: an older row's may overflow the sum.)
                     SELECT greatest(least(max(heartbeat_every), interval '3650 days'),
                                     %(risk_window)s::interval)
                     FROM {schema}.workers)
                 AND j.lease_until < {now} + coalesce(
                     (SELECT least(greatest(w.heartbeat_every, interval '0'), interval '3650 days')
                      FROM {schema}.workers AS w
                      WHERE w.worker_id = j.lease_owner),
                     %(risk_window)s::interval)
           ) AS at_risk
    FROM {schema}.jobs AS j
    WHERE j.status = 'Processing' AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
) AS r
CROSS JOIN (
    SELECT count(*) AS stuck
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Stuck' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
          LIMIT %(budget)s::bigint + 1) AS x
) AS s
CROSS JOIN (
    -- Behind their concurrency key (migration 18), on jobs_waiting_idx, bounded as Stuck is.
    SELECT count(*) AS waiting
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Waiting' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
          LIMIT %(budget)s::bigint + 1) AS x
) AS w
CROSS JOIN LATERAL (
    SELECT CASE WHEN p.pending > %(budget)s::bigint
                THEN {schema}.estimate_jobs('Pending', %(queue)s::text) END AS pending_estimate
) AS pe
LEFT JOIN LATERAL {schema}.pending_recount(
    ARRAY[%(queue)s::text], ARRAY[pe.pending_estimate], {now}, %(recount_cap)s::bigint,
    %(recount_budget)s::bigint) AS rc ON true;

-- name: console_throughput
-- Completed and Failed jobs per clock minute that finished at or after %(since)s (NULL: the
-- window of the last %(minutes)s minutes, the current one included), and the part of each count
-- that finished before {now} - %(grace)s: settled, so the console keeps it and next time counts
-- only from there (leasectl/core/throughput.py). One bounded range count per minute on the
-- finished_at index: no per-row bucket arithmetic, no hash aggregate.
WITH bounds AS (
    SELECT greatest(%(since)s::timestamptz,
                    date_trunc('minute', {now}) - make_interval(mins => %(minutes)s::integer - 1))
               AS since,
           {now} - %(grace)s::interval AS settled
)
-- The minutes come from an integer series: its row count is known to the planner (a series
-- of timestamps is estimated at 1,000 rows, enough to make the plan look costly).
SELECT m.minute, c.completed, c.failed, c.settled_completed, c.settled_failed
FROM bounds AS b
CROSS JOIN LATERAL (
    SELECT date_trunc('minute', {now}) - make_interval(mins => k) AS minute
    FROM generate_series(0, %(minutes)s::integer - 1) AS k
    WHERE date_trunc('minute', {now}) - make_interval(mins => k) >= date_trunc('minute', b.since)
) AS m
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE status = 'Completed') AS completed,
           count(*) FILTER (WHERE status = 'Failed') AS failed,
           count(*) FILTER (WHERE status = 'Completed' AND finished_at < b.settled)
               AS settled_completed,
           count(*) FILTER (WHERE status = 'Failed' AND finished_at < b.settled)
               AS settled_failed
    FROM {schema}.jobs
    WHERE status IN ('Completed', 'Failed')
      AND finished_at >= greatest(m.minute, b.since)
      AND finished_at < m.minute + interval '1 minute'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
) AS c
WHERE c.completed + c.failed > 0;

-- name: console_pending
-- The Pending panel: longest claimable first, then delayed retries by run_at, then Waiting jobs (behind their concurrency key) with their key's holder; bounded.
-- The claim index is ordered by (queue, priority, run_at, id), not by run_at: rather than sort
-- every Pending row, walk its (queue, priority) groups (a loose index scan), take the first
-- %(limit)s of each in run_at order and merge those. Past 64 groups, or filtered by job, sort the
-- Pending rows. Filtered by owner (a prefix of lease_owner), walk the owner's range of the Pending
-- owner index (migration 13): %(owner)s <= lease_owner < %(owner_end)s, in "C" order; with no end
-- (the prefix is all U+10FFFF), every owner from the prefix up has it.
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
    WHERE g.n <= 64
), picked AS (
    (SELECT p.id, p.run_at
     FROM grp AS g
     CROSS JOIN LATERAL (
         SELECT id, run_at
         FROM {schema}.jobs
         WHERE status = 'Pending' AND queue = g.queue AND priority = g.priority
         ORDER BY run_at, id
         LIMIT %(limit)s
     ) AS p
     WHERE %(owner)s::text IS NULL AND %(job_id)s::bigint IS NULL
       AND (SELECT count(*) FROM grp) <= 64
     ORDER BY p.run_at, p.id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, run_at
     FROM {schema}.jobs
     WHERE status = 'Pending'
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
       AND %(owner)s::text IS NULL
       AND (%(job_id)s::bigint IS NOT NULL OR (SELECT count(*) FROM grp) > 64)
     ORDER BY run_at, id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, run_at
     FROM {schema}.jobs
     WHERE status = 'Pending'
       AND lease_owner COLLATE "C" >= %(owner)s::text
       AND lease_owner COLLATE "C" < %(owner_end)s::text
       AND starts_with(lease_owner, %(owner)s::text)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
     ORDER BY run_at, id
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, run_at
     FROM {schema}.jobs
     WHERE status = 'Pending'
       AND lease_owner COLLATE "C" >= %(owner)s::text
       AND %(owner_end)s::text IS NULL
       AND starts_with(lease_owner, %(owner)s::text)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
       AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
     ORDER BY run_at, id
     LIMIT %(limit)s)
), waiting AS (
    -- Below the Pending jobs, the Waiting ones (behind their concurrency key, migration 18): the
    -- first %(limit)s in jobs_waiting_idx's order (queue, key, queue order), no sort of them all.
    SELECT id, run_at
    FROM {schema}.jobs
    WHERE status = 'Waiting'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
      AND %(owner)s::text IS NULL
    ORDER BY queue, concurrency_key, priority, run_at, id
    LIMIT %(limit)s
)
SELECT j.id, j.queue, j.status::text AS status, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.lease_owner, j.lease_until, j.heartbeat_at,
       left(j.last_error, 300) AS last_error, j.created_at, j.updated_at,
       left(j.concurrency_key, 200) AS concurrency_key, kh.id AS key_holder
FROM (SELECT id, run_at, false AS waits FROM picked
      UNION ALL
      SELECT id, run_at, true FROM waiting) AS p
JOIN {schema}.jobs AS j ON j.id = p.id
-- A Waiting job's key holder: its key's head (jobs_key_head_idx, one probe).
LEFT JOIN LATERAL (
    SELECT h.id FROM {schema}.jobs AS h
    WHERE p.waits AND h.queue = j.queue AND h.concurrency_key = j.concurrency_key
      AND h.status IN ('Pending', 'Processing', 'Stuck')
) AS kh ON true
ORDER BY p.waits, p.run_at, p.id
LIMIT %(limit)s;

-- name: console_processing
-- The Processing panel: soonest lease expiry first (expired first of all), with the owner's
-- heartbeat interval that decides "at risk"; bounded. The order is picked on narrow rows and
-- only the rows shown are read whole and joined to their owner. Its expired rows (lease_until
-- before {now}) are also the Stuck panel's expired leases: in this order they come first, so
-- these rows hold all of them or %(limit)s of them, the first ones.
WITH picked AS (
    SELECT id, lease_until
    FROM {schema}.jobs
    WHERE status = 'Processing'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(owner)s::text IS NULL OR starts_with(lease_owner, %(owner)s::text))
      AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
    ORDER BY lease_until, id
    LIMIT %(limit)s
)
SELECT j.id, j.queue, j.status::text AS status, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.lease_owner, j.lease_until, j.heartbeat_at,
       left(j.last_error, 300) AS last_error, j.created_at, j.updated_at,
       coalesce(least(greatest(w.heartbeat_every, interval '0'), interval '3650 days'),
                %(risk_window)s::interval) AS risk_window,
       j.lease_until AS lapsed_at,
       -- (The current attempt's report only: migration 32.)
       CASE WHEN j.progress_attempt = j.attempts THEN j.progress END AS progress
FROM picked AS p
JOIN {schema}.jobs AS j ON j.id = p.id
LEFT JOIN {schema}.workers AS w ON w.worker_id = j.lease_owner
ORDER BY p.lease_until, p.id;

-- name: console_stuck
-- The Stuck panel's Stuck jobs, longest lapsed first; bounded. (Its expired Processing leases
-- are the expired rows of console_processing, merged in by lapsed_at, id.) A Stuck job keeps
-- lease_until when it lapsed; one quarantined from Pending has none, so its quarantine time
-- (updated_at) stands in. Picked on narrow rows, then the shown rows read whole, each with the
-- last audit event that quarantined it (who, why, when): one backward step per shown row on
-- the events' (job_id, id) index. Marking a job stuck writes the reason over last_error: then
-- its last error is the last one an attempt recorded before (one backward step per shown row
-- on job_attempts' primary key), not the reason again.
WITH picked AS (
    SELECT id, coalesce(lease_until, updated_at) AS lapsed_at
    FROM {schema}.jobs
    WHERE status = 'Stuck'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(owner)s::text IS NULL OR starts_with(lease_owner, %(owner)s::text))
      AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
    ORDER BY coalesce(lease_until, updated_at), id
    LIMIT %(limit)s
)
SELECT j.id, j.queue, j.status::text AS status, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.lease_owner, j.lease_until, j.heartbeat_at,
       left(CASE WHEN e.reason IS NOT NULL AND j.last_error = e.reason THEN a.error
                 ELSE j.last_error END, 300) AS last_error,
       j.created_at, j.updated_at, p.lapsed_at,
       left(e.actor, 300) AS quarantined_by, left(e.reason, 300) AS quarantine_reason,
       e.at AS quarantined_at
FROM picked AS p
JOIN {schema}.jobs AS j ON j.id = p.id
LEFT JOIN LATERAL (
    SELECT ev.actor, ev.reason, ev.at
    FROM {schema}.job_events AS ev
    WHERE ev.job_id = p.id AND ev.action IN ('mark_stuck', 'mark_stuck_forced')
    ORDER BY ev.id DESC
    LIMIT 1
) AS e ON true
LEFT JOIN LATERAL (
    SELECT att.error
    FROM {schema}.job_attempts AS att
    WHERE att.job_id = p.id AND att.error IS NOT NULL AND att.outcome <> 'marked_stuck'
    ORDER BY att.attempt DESC
    LIMIT 1
) AS a ON true
ORDER BY p.lapsed_at, p.id;

-- name: console_match_counts
-- What an owner filter (%(owner)s, a prefix of lease_owner) matches in %(queue)s (NULL: every
-- queue): the counts a panel title and "requeue all expired" compare the rows shown with. Run
-- only under an owner filter. Pending walks the owner's range of the Pending owner index, as
-- console_pending does (%(owner_end)s NULL: from the prefix up); Processing and Stuck their
-- status's partial index. Pending and Stuck stop at %(budget)s + 1 matches (returned as "cap", as
-- in console_counts); Processing and expired are exact.
SELECT p.pending, r.processing, r.expired, s.stuck, %(budget)s::bigint AS cap
FROM (
    SELECT count(*) AS pending
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Pending' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
            AND lease_owner COLLATE "C" >= %(owner)s::text
            AND lease_owner COLLATE "C" < %(owner_end)s::text
            AND starts_with(lease_owner, %(owner)s::text)
          UNION ALL
          SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Pending' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
            AND lease_owner COLLATE "C" >= %(owner)s::text
            AND %(owner_end)s::text IS NULL
            AND starts_with(lease_owner, %(owner)s::text)
          LIMIT %(budget)s::bigint + 1) AS x
) AS p
CROSS JOIN (
    SELECT count(*) AS processing, count(*) FILTER (WHERE lease_until < {now}) AS expired
    FROM {schema}.jobs
    WHERE status = 'Processing' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND starts_with(lease_owner, %(owner)s::text)
) AS r
CROSS JOIN (
    SELECT count(*) AS stuck
    FROM (SELECT 1
          FROM {schema}.jobs
          WHERE status = 'Stuck' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
            AND starts_with(lease_owner, %(owner)s::text)
          LIMIT %(budget)s::bigint + 1) AS x
) AS s;

-- name: console_queues
-- Every queue that has live jobs (Pending, Processing or Stuck), for the filter dialog, whatever
-- the filter shows: a loose index scan of each status's partial index (one step per queue), at
-- most %(queue_limit)s names.
WITH RECURSIVE pending AS (
    (SELECT queue FROM {schema}.jobs WHERE status = 'Pending' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Pending' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM pending AS q
    WHERE q.queue IS NOT NULL
), processing AS (
    (SELECT queue FROM {schema}.jobs WHERE status = 'Processing' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Processing' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM processing AS q
    WHERE q.queue IS NOT NULL
), stuck AS (
    (SELECT queue FROM {schema}.jobs WHERE status = 'Stuck' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM {schema}.jobs AS j
            WHERE j.status = 'Stuck' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
    FROM stuck AS q
    WHERE q.queue IS NOT NULL
)
SELECT queue FROM (
    SELECT queue FROM (SELECT queue FROM pending LIMIT %(queue_limit)s + 1) AS a
    UNION
    SELECT queue FROM (SELECT queue FROM processing LIMIT %(queue_limit)s + 1) AS b
    UNION
    SELECT queue FROM (SELECT queue FROM stuck LIMIT %(queue_limit)s + 1) AS c
) AS q
WHERE queue IS NOT NULL
ORDER BY queue
LIMIT %(queue_limit)s;

-- name: console_failed
-- The Failed panel: the Failed jobs among the last %(failed_scan)s jobs that finished, newest
-- first; bounded. Failed jobs are few among the finished ones and no index orders them alone,
-- so the walk down the finished-history index (finished_at) stops after %(failed_scan)s
-- finished rows, whatever the filter keeps of them: a queue with no recent failure costs the
-- same as any other. The filters apply to the rows walked, then the shown rows are read whole.
WITH recent AS (
    SELECT id, finished_at, status, queue, lease_owner
    FROM {schema}.jobs
    WHERE status IN ('Completed', 'Failed') AND finished_at IS NOT NULL
    ORDER BY finished_at DESC
    LIMIT %(failed_scan)s
), picked AS (
    SELECT id, finished_at
    FROM recent
    WHERE status = 'Failed'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(owner)s::text IS NULL OR starts_with(lease_owner, %(owner)s::text))
      AND (%(job_id)s::bigint IS NULL OR id = %(job_id)s::bigint)
    ORDER BY finished_at DESC, id DESC
    LIMIT %(limit)s
)
SELECT j.id, j.queue, j.status::text AS status, j.priority, j.run_at, j.attempts,
       j.max_attempts, j.lease_owner, j.lease_until, j.heartbeat_at,
       left(j.last_error, 300) AS last_error, j.created_at, j.updated_at,
       p.finished_at
FROM picked AS p
JOIN {schema}.jobs AS j ON j.id = p.id
ORDER BY p.finished_at DESC, p.id DESC;

-- name: console_paused
-- The paused queues (migration 7's queue_state: one row per paused queue, a handful at most),
-- whatever the filter shows, by name: at most %(paused_limit)s of them, and how many there are.
-- The reason is cut to 200 characters: the summary shows one line of it.
SELECT queue, paused_at, paused_by, left(reason, 200) AS reason, count(*) OVER () AS total
FROM {schema}.queue_state
ORDER BY queue
LIMIT %(paused_limit)s;
