-- `leasectl errors` and `leasectl events`: what went wrong and who did what, over a recent
-- window. Each reads at most %(scan)s rows of its table, newest first, through an index (the
-- failed attempts by end time, migration 22; the audit tables by their primary key), whatever
-- the size of the history, and says how many it read (and, for the events, how far back they
-- went), so that the command can say when the window held more than it read.

-- name: incident_settings
-- The read's transaction: its statement timeout, and now() as the window's reference.
SELECT set_config('statement_timeout', %(timeout_ms)s::text, true) AS statement_timeout,
       now() AS db_now;

-- name: errors_failures
-- The failed attempts of the last %(since)s, newest first, at most %(scan)s of %(queue)s (every queue's when NULL; job_attempts_failed_queue_idx, job_attempts_failed_idx and job_attempts_failed_unkinded_idx), counted by stored kind and queue, and, for the attempts stored without a kind, by first line (at most %(chars)s characters), traceback flag and queue: each count with its first and last end time and the job of its latest attempt. Their sum is how many were read.
-- The attempts stored with a kind (migration 29) come from their index alone (an index-only
-- scan, but for the pages of the last minutes, which the visibility map does not cover yet);
-- the others, from before that migration or an older worker, are read as before: their row
-- through their own index (only the first %(chars)s characters of the error detoasted), their
-- queue by their job's primary key. One pass: the newest of both indexes merged, counted.
WITH scanned AS (
    -- Each index read newest first up to the cap (the merge then reads of each only what it
    -- keeps, or, planned as a sort, at most the cap of each).
    SELECT * FROM (
        (SELECT a.job_id, a.ended_at, a.queue, a.error_kind, NULL::text AS error,
                false AS traced
         FROM {schema}.job_attempts AS a
         WHERE a.outcome = 'failed' AND a.error_kind IS NOT NULL
           AND a.ended_at >= now() - %(since)s::interval
           -- (Every queue's: a one-time filter, this branch or the next one runs.)
           AND %(queue)s::text IS NULL
         ORDER BY a.ended_at DESC
         LIMIT %(scan)s::integer)
        UNION ALL
        -- One queue's, from its own index (migration 30): another queue's failures, however
        -- many, never fill the read before this queue's are reached.
        (SELECT a.job_id, a.ended_at, a.queue, a.error_kind, NULL::text AS error,
                false AS traced
         FROM {schema}.job_attempts AS a
         WHERE a.outcome = 'failed' AND a.error_kind IS NOT NULL
           AND a.queue = %(queue)s::text
           AND a.ended_at >= now() - %(since)s::interval
         ORDER BY a.ended_at DESC
         LIMIT %(scan)s::integer)
        UNION ALL
        (SELECT a.job_id, a.ended_at, NULL, NULL,
                split_part(left(a.error, %(chars)s::integer), E'\n', 1),
                a.error_detail IS NOT NULL
         FROM {schema}.job_attempts AS a
         WHERE a.outcome = 'failed' AND a.error_kind IS NULL
           AND a.ended_at >= now() - %(since)s::interval
         ORDER BY a.ended_at DESC
         LIMIT %(scan)s::integer)
    ) AS b
    ORDER BY ended_at DESC
    LIMIT %(scan)s::integer
)
-- One queue a count (the caller filters and merges them): no ordered or DISTINCT aggregate,
-- so the counts may be hashed; sorted, by bytes (COLLATE "C": equal is equal in any
-- deterministic collation, and ten thousand comparisons through the locale cost more than the
-- rest of the read). The latest attempt's job is the one of the largest (end time, job id)
-- pair, both as float8 (cheaper than numeric's epoch: a timestamptz is whole microseconds,
-- and float8 seconds keep microseconds apart and in order until the 23rd century; ids are
-- exact below 2^53). The queue of an attempt
-- stored without one by its job's primary key (a subquery, not a join: a join would be
-- planned as a hash of every job).
SELECT s.error_kind COLLATE "C" AS kind, s.error COLLATE "C" AS error, s.traced,
       coalesce(s.queue, (SELECT j.queue FROM {schema}.jobs AS j WHERE j.id = s.job_id))
           COLLATE "C" AS queue,
       count(*) AS failures, min(s.ended_at) AS first_at, max(s.ended_at) AS last_at,
       (max(ARRAY[date_part('epoch', s.ended_at), s.job_id::float8]))[2]::bigint
           AS example_job
FROM scanned AS s
GROUP BY 1, 2, 3, 4;

-- name: events_jobs
-- The last %(scan)s job_events rows (the primary key, backwards) folded per statement: one row per instant, actor, role, action and reason of the last %(since)s (of %(actor)s, of jobs of %(queue)s, when given), newest first, at most %(limit)s; each with how many rows were read and the oldest one's time.
WITH scanned AS MATERIALIZED (
    SELECT e.job_id, e.at, e.actor, e.db_role, e.action, e.reason
    FROM {schema}.job_events AS e
    ORDER BY e.id DESC
    LIMIT %(scan)s::integer
), summary AS (
    SELECT count(*) AS scanned, min(at) AS oldest FROM scanned
), folded AS (
    SELECT e.at, e.actor, e.db_role, e.action, e.reason, count(*) AS jobs,
           min(e.job_id) AS first_job, max(e.job_id) AS last_job,
           array_remove(array_agg(DISTINCT e.queue), NULL) AS queues
    FROM (
        -- Each job's queue by its primary key (NULL once pruned), one probe per row in the
        -- window (a join would be planned as a hash of every job).
        SELECT s.*, (SELECT j.queue FROM {schema}.jobs AS j WHERE j.id = s.job_id) AS queue
        FROM scanned AS s
        WHERE s.at >= now() - %(since)s::interval
          AND (%(actor)s::text IS NULL OR s.actor = %(actor)s::text)
    ) AS e
    WHERE %(queue)s::text IS NULL OR e.queue = %(queue)s::text
    GROUP BY e.at, e.actor, e.db_role, e.action, e.reason
    ORDER BY e.at DESC
    LIMIT %(limit)s::integer
)
SELECT m.scanned, m.oldest, f.*
FROM summary AS m
LEFT JOIN folded AS f ON true
ORDER BY f.at DESC NULLS LAST;

-- name: events_queues
-- The last %(scan)s queue_events rows (pause, resume, limits) of the last %(since)s (of %(actor)s, of %(queue)s, when given), newest first, at most %(limit)s; each with how many rows were read and the oldest one's time.
WITH scanned AS MATERIALIZED (
    SELECT e.queue, e.at, e.actor, e.db_role, e.action, e.reason
    FROM {schema}.queue_events AS e
    ORDER BY e.id DESC
    LIMIT %(scan)s::integer
), summary AS (
    SELECT count(*) AS scanned, min(at) AS oldest FROM scanned
), found AS (
    SELECT e.*
    FROM scanned AS e
    WHERE e.at >= now() - %(since)s::interval
      AND (%(actor)s::text IS NULL OR e.actor = %(actor)s::text)
      AND (%(queue)s::text IS NULL OR e.queue = %(queue)s::text)
    ORDER BY e.at DESC
    LIMIT %(limit)s::integer
)
SELECT m.scanned, m.oldest, f.*
FROM summary AS m
LEFT JOIN found AS f ON true
ORDER BY f.at DESC NULLS LAST;
