-- `leasectl errors` and `leasectl events`: what went wrong and who did what, over a recent
-- window. Each reads at most %(scan)s rows of its table, newest first, through an index (the
-- failed attempts by end time, migration 22; the audit tables by their primary key), whatever
-- the size of the history; its first row says how many it read and how far back they went, so
-- that the command can say when the window held more than it read.

-- name: incident_settings
-- The read's transaction: its statement timeout, and now() as the window's reference.
SELECT set_config('statement_timeout', %(timeout_ms)s::text, true) AS statement_timeout,
       now() AS db_now;

-- name: errors_failures
-- The failed attempts of the last %(since)s, newest first, at most %(scan)s (job_attempts_failed_idx), with their job's queue (of %(queue)s only, when given): the first line of each error (at most %(chars)s characters), whether a traceback was recorded.
WITH scanned AS MATERIALIZED (
    SELECT a.job_id, a.ended_at,
           left(split_part(a.error, E'\n', 1), %(chars)s::integer) AS error,
           a.error_detail IS NOT NULL AS traced
    FROM {schema}.job_attempts AS a
    WHERE a.outcome = 'failed' AND a.ended_at >= now() - %(since)s::interval
    ORDER BY a.ended_at DESC
    LIMIT %(scan)s::integer
), summary AS (
    SELECT count(*) AS scanned FROM scanned
), queued AS (
    -- Each job's queue by its primary key, one probe per failure read (a join would be planned
    -- as a hash of every job).
    SELECT s.*, (SELECT j.queue FROM {schema}.jobs AS j WHERE j.id = s.job_id) AS queue
    FROM scanned AS s
), found AS (
    SELECT job_id, queue, ended_at, error, traced
    FROM queued
    WHERE %(queue)s::text IS NULL OR queue = %(queue)s::text
)
SELECT m.scanned, f.job_id, f.queue, f.ended_at, f.error, f.traced
FROM summary AS m
LEFT JOIN found AS f ON true
ORDER BY f.ended_at DESC NULLS LAST;

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
