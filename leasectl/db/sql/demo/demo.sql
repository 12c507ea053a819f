-- The demo's own statements, loaded by leasectl.db.demo with the same parser as
-- leasectl/db/sql/. {schema} is the quoted schema name; {database} (database DDL only) is a
-- quoted database name spliced in with psycopg.sql.Identifier. Values are bound parameters.

-- name: demo_lock_try
-- One demo per embedded server or external schema: a session advisory lock, gone with the session.
SELECT pg_try_advisory_lock(hashtextextended(%(key)s, 0)) AS locked;

-- name: demo_database_exists
-- Whether the embedded server already has the demo's database.
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS present;

-- name: demo_database_create
-- Create the demo's database on the embedded server.
CREATE DATABASE {database};

-- name: demo_database_drop
-- `--fresh` on the embedded server: drop the demo's database, disconnecting its sessions.
DROP DATABASE IF EXISTS {database} WITH (FORCE);

-- name: demo_schema_state
-- Whether a schema exists and whether `leasectl demo` created it (its comment says so).
SELECT n.oid IS NOT NULL AS present,
       coalesce(starts_with(obj_description(n.oid, 'pg_namespace'), 'leasectl demo:'), false)
           AS ours
FROM (SELECT 1) AS one
LEFT JOIN pg_namespace AS n ON n.nspname = %(schema)s;

-- name: demo_schema_create
-- Create the demo's schema on an external server (labelled right after, before any table).
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: demo_schema_mark
-- Label a schema the demo created, so that a later `--fresh` knows it may drop it.
COMMENT ON SCHEMA {schema} IS
    'leasectl demo: created by `leasectl demo`; `leasectl demo --fresh` drops it';

-- name: demo_schema_drop
-- `--fresh` against an external server: drop the demo's own (labelled) schema.
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: demo_workers_up
-- Which of the fleet's worker ids have registered and not stopped (the fleet is up).
SELECT worker_id FROM {schema}.workers
WHERE worker_id = ANY(%(ids)s) AND stopped_at IS NULL;

-- name: demo_leases_held
-- The live leases one worker holds (the chaos schedule picks a moment when the victim has work).
SELECT id, attempts FROM {schema}.jobs
WHERE status = 'Processing' AND lease_owner = %(owner)s AND lease_until >= now()
ORDER BY id;

-- name: demo_leases_still_held
-- Which of a stalled worker's leases (id, attempt) are still its own: none once they were moved.
SELECT j.id
FROM {schema}.jobs AS j
JOIN unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS f(id, attempt) ON f.id = j.id
WHERE j.attempts = f.attempt AND j.lease_owner = %(owner)s AND j.status = 'Processing'
ORDER BY j.id;

-- name: demo_live_leases
-- Processing jobs in the demo's schema, and those with a live lease (SIGKILLed workers keep theirs).
SELECT count(*) AS processing, count(*) FILTER (WHERE lease_until >= now()) AS leased
FROM {schema}.jobs
WHERE status = 'Processing';

-- name: demo_jobs_tally
-- The run's own jobs (by id) by state, for progress lines, the drain and the summary.
SELECT count(*) AS present,
       count(*) FILTER (WHERE status = 'Pending') AS pending,
       count(*) FILTER (WHERE status = 'Processing') AS processing,
       count(*) FILTER (WHERE status = 'Processing' AND lease_until >= now()) AS leased,
       count(*) FILTER (WHERE status = 'Completed') AS completed,
       count(*) FILTER (WHERE status = 'Failed') AS failed,
       count(*) FILTER (WHERE status = 'Stuck') AS stuck
FROM {schema}.jobs
WHERE id = ANY(%(ids)s);

-- name: demo_attempts_tally
-- The run's attempts by outcome, and jobs with more than one completed attempt (must be none).
SELECT count(*) FILTER (WHERE outcome = 'failed') AS failed_attempts,
       count(*) FILTER (WHERE outcome = 'expired') AS expired_leases,
       count(*) FILTER (WHERE outcome = 'released') AS released,
       (SELECT count(*) FROM (
            SELECT job_id FROM {schema}.job_attempts
            WHERE job_id = ANY(%(ids)s) AND outcome = 'completed'
            GROUP BY job_id HAVING count(*) > 1
        ) AS twice) AS completed_twice
FROM {schema}.job_attempts
WHERE job_id = ANY(%(ids)s);

-- name: demo_events_tally
-- What the run's watcher and its scripted operator did to the run's jobs.
SELECT count(*) FILTER (WHERE actor = %(watcher)s AND action = 'requeue') AS watcher_requeued,
       count(*) FILTER (WHERE actor = %(watcher)s) AS watcher_moved,
       count(*) FILTER (WHERE actor = %(operator)s
                          AND action IN ('mark_stuck', 'mark_stuck_forced')) AS quarantined
FROM {schema}.job_events
WHERE job_id = ANY(%(ids)s);

-- name: demo_last_run
-- When an earlier demo last used this schema (its workers' last signs of life) and whether it left jobs.
SELECT (SELECT max(greatest(last_seen_at, stopped_at)) FROM {schema}.workers) AS last_seen,
       EXISTS (SELECT 1 FROM {schema}.jobs) AS has_jobs,
       now() AS db_now;
