-- The history's pickups are counted when their attempt ends, by the trigger that already counts
-- the attempt's outcome, not by the claim (design.md, "History"). {schema} is the quoted schema
-- name; as in migration 6, the PL/pgSQL body names no schema (history_running_pickups' does:
-- an SQL-standard body, parsed when it is created, no string a schema's name could end).
--
-- Migration 30 made each claim append its pickups to queue_history_deltas in a data-modifying
-- CTE: one more node that inserts, and an aggregate, set up by every claim statement. It was
-- still most of what the history cost a worker's round trip (BENCHMARKS.md, "This round's
-- costs"). Now the claim writes two more values into the attempt row it inserts anyway: the
-- job's queue and when the job became due (`due_at`, greatest(created_at, run_at) at the
-- claim). When the attempt ends (completed, failed, snoozed, released, expired, cancelled: any
-- statement that sets its ended_at), counters_from_attempts, which runs for that statement
-- already, counts its pickup in the minute the attempt STARTED, in the bucket of
-- started_at - due_at, in the same INSERT as the outcome's counts. A pickup is therefore in the
-- history once its attempt has ended (a lease that lapses ends when it is taken over or
-- requeued); an attempt deleted while running (its job deleted) is never counted.
--
-- The same trigger no longer reads jobs for an attempt that knows its queue and completed: the
-- primary-key probe of jobs per ended attempt stays only for failures (was the job put back
-- to Pending: a retry?) and for attempts opened before this migration (no queue).
--
-- Attempts opened before this migration were counted by their claim (migration 30) and have no
-- due_at: their end counts no pickup, so none is counted twice.
--
-- A worker no longer writes queue_history_deltas: the INSERT privilege migration 30 gave it is
-- taken back, and the policy that bounded it dropped (the table keeps row-level security: with
-- no INSERT policy, only its owner writes it). What a worker writes into its attempt row
-- (queue, due_at, started_at) now decides the pickup's queue, bucket and minute; the trigger
-- puts a minute after the statement's own into the statement's minute. A worker could write
-- any pickup through migration 30's policy too (any queue, any bucket, up to 1,000 a row); it
-- may still open attempts of any job, each one counted.

ALTER TABLE {schema}.job_attempts ADD COLUMN due_at timestamptz;

-- The pickup latency's bucket (history_bucket's, migration 20) of a wait from `due` to
-- `started`: the same bucket for every whole number of microseconds (a test proves it at each
-- bound), by a binary search of the 63 bounds. history_bucket computes in float8 from
-- milliseconds, and the wait's milliseconds (extract, date_part) are computed in numeric: that
-- and the logarithm cost about 3 microseconds an attempt, on the statement that ends it. An
-- infinite time (written by hand, or by a role that may write the row: a worker writes
-- updated_at and its attempts' times) is no error, which would fail the statement that ends
-- the attempt or every reader: the first bucket, or the open one if it started after.
CREATE FUNCTION {schema}.history_wait_bucket(started timestamptz, due timestamptz)
RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN (CASE WHEN isfinite(started) AND isfinite(due) THEN least(63, width_bucket(started - due,
    '{1000 us,1415 us,2000 us,2829 us,4000 us,5657 us,8000 us,11314 us,16000 us,22628 us,
      32000 us,45255 us,64000 us,90510 us,128000 us,181020 us,256000 us,362039 us,512000 us,
      724078 us,1024000 us,1448155 us,2048000 us,2896310 us,4096000 us,5792619 us,8192000 us,
      11585238 us,16384000 us,23170476 us,32768000 us,46340951 us,65536000 us,92681901 us,
      131072000 us,185363801 us,262144000 us,370727601 us,524288000 us,741455201 us,
      1048576000 us,1482910401 us,2097152000 us,2965820801 us,4194304000 us,5931641602 us,
      8388608000 us,11863283204 us,16777216000 us,23726566407 us,33554432000 us,47453132813 us,
      67108864000 us,94906265625 us,134217728000 us,189812531249 us,268435456000 us,
      379625062498 us,536870912000 us,759250124995 us,1073741824000 us,1518500249989 us,
      2147483648000 us}'::interval[]))
             WHEN started > due THEN 63 ELSE 0 END)::smallint;

LOCK TABLE {schema}.job_attempts IN SHARE MODE;

CREATE OR REPLACE FUNCTION {schema}.counters_from_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    -- Each attempt of the statement counted once as it is now (+1) and once as it was (-1): an
    -- attempt whose outcome or end did not change counts nothing. Every row taken has ended (a
    -- completed or failed attempt has its ended_at), so each counts its pickup, if its claim
    -- wrote a due time. The attempts are summed first by queue, start minute and wait bucket
    -- (a statement's attempts fall in a few such groups), and each group's sums then made
    -- rows: making four rows of each attempt and hashing them cost a statement of 50 attempts
    -- half again as much (BENCHMARKS.md, "This round's costs").
    INSERT INTO queue_history_deltas (queue, minute, counter, bucket, delta)
    SELECT g.queue, k.minute, k.counter, k.bucket, k.n
    FROM (
        SELECT coalesce(c.queue, j.queue) AS queue,
               date_bin('1 minute', c.started_at, timestamptz '2000-01-01 00:00+00') AS started,
               history_wait_bucket(c.started_at, c.due_at) AS bucket,
               sum(c.sign) FILTER (WHERE c.outcome = 'completed') AS completed,
               sum(c.sign) FILTER (WHERE c.outcome = 'failed') AS failed,
               sum(c.sign) FILTER (WHERE c.outcome = 'failed' AND j.status = 'Pending')
                   AS retried,
               sum(c.sign) FILTER (WHERE c.due_at IS NOT NULL) AS pickups
        FROM (
            SELECT job_id, outcome, queue, started_at, due_at, 1 AS sign
            FROM new_attempts
            WHERE outcome IN ('completed', 'failed')
               OR (ended_at IS NOT NULL AND due_at IS NOT NULL)
            UNION ALL
            SELECT job_id, outcome, queue, started_at, due_at, -1
            FROM old_attempts
            WHERE outcome IN ('completed', 'failed')
               OR (ended_at IS NOT NULL AND due_at IS NOT NULL)
        ) AS c
        -- The job, by primary key, only where the attempt cannot tell: a failure's retry, and
        -- the queue of an attempt opened before this migration (a one-time filter on c's
        -- columns).
        LEFT JOIN LATERAL (
            SELECT queue, status FROM jobs
            WHERE id = c.job_id AND (c.outcome = 'failed' OR c.queue IS NULL)
            OFFSET 0
        ) AS j ON true
        GROUP BY 1, 2, 3
    ) AS g
    -- The statement's minute (UTC), and a pickup's: date_bin, since date_trunc with a time
    -- zone looks the zone up at each call. (No PL/pgSQL variable: a parameter would have the
    -- statement planned again at each call, a custom plan, which cost more than all of its
    -- execution.)
    CROSS JOIN LATERAL (
        SELECT date_bin('1 minute', statement_timestamp(), timestamptz '2000-01-01 00:00+00')
    ) AS s(minute)
    CROSS JOIN LATERAL (
        VALUES ('completed', s.minute, 0::smallint, g.completed),
               ('failed', s.minute, 0::smallint, g.failed),
               ('retried', s.minute, 0::smallint, g.retried),
               ('pickup', least(g.started, s.minute), g.bucket, g.pickups)
    ) AS k(counter, minute, bucket, n)
    -- Each group's sums are rows of their own, not added up again (a second aggregate cost a
    -- statement of one attempt more than it saved): a statement whose attempts started in two
    -- minutes writes the statement minute's completions as two rows, which the fold adds. An
    -- attempt read as it was and as it is falls in one group (the same queue, start and due
    -- time), where the two net to 0: no row.
    WHERE k.n > 0;
    RETURN NULL;
END
$$;

-- The pickups of the attempts still running, which their end will count: one row each (its
-- queue, the minute it started, its bucket), of the attempts started at `since` or later, of
-- one queue or of all (NULL). The readers of the history (`stats`, `status`, the exporter,
-- the console's Queues view) add them to the counted ones, so that a minute's `started` and
-- pickup latency are whole while its attempts run: a queue of ten-minute jobs shows its
-- pickups as they start. Read from the Processing jobs alone (jobs_processing_idx), no attempt
-- row: a Processing job's updated_at is its claim's now(), its attempt's started_at (no
-- statement but a claim writes updated_at without changing the status: heartbeats do not),
-- and created_at and run_at are as the claim saw them, so that the job gives the same minute
-- and bucket as its attempt's end will. Leases taken before this migration, counted by their
-- claim, are left out by the time it was applied. At most 10,000 Processing jobs are looked
-- at (a worker role can hold any number of leases: a reader's time stays bounded). As its
-- caller (SECURITY INVOKER), and with no SET clause, so that it is inlined into the statement
-- that reads it and planned with it: an SQL-standard body, its names bound when it is created
-- (no search_path, and no quoting a schema's name could end).
CREATE FUNCTION {schema}.history_running_pickups(since timestamptz, only_queue text)
RETURNS TABLE (queue text, minute timestamptz, bucket smallint)
LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    -- (A start after now(), which only a row written by hand or by a worker has, counts in
    -- now()'s minute, as the trigger counts it.)
    SELECT j.queue,
           least(pg_catalog.date_bin('1 minute', j.updated_at, timestamptz '2000-01-01 00:00+00'),
                 pg_catalog.date_bin('1 minute', pg_catalog.now(),
                                     timestamptz '2000-01-01 00:00+00')),
           {schema}.history_wait_bucket(j.updated_at, greatest(j.created_at, j.run_at))
    FROM {schema}.jobs AS j
    WHERE j.status OPERATOR(pg_catalog.=) 'Processing'
      AND (only_queue IS NULL OR j.queue OPERATOR(pg_catalog.=) only_queue)
      AND j.updated_at OPERATOR(pg_catalog.>=) since
      AND j.updated_at OPERATOR(pg_catalog.>) (
          SELECT m.applied_at FROM {schema}.schema_migrations AS m
          WHERE m.version OPERATOR(pg_catalog.=) 31)
    LIMIT 10000;
END;

-- The claims no longer append pickups: workers granted by an older leasectl lose the INSERT on
-- the deltas (migration 30's) and gain the two columns of their attempt rows.
DROP POLICY queue_history_deltas_pickups ON {schema}.queue_history_deltas;

CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'queue_history_deltas'::regclass AND a.privilege_type = 'INSERT'
          AND a.grantee NOT IN (0, c.relowner)
        UNION
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, pg_class c, aclexplode(t.attacl) a
        WHERE t.attrelid = 'queue_history_deltas'::regclass AND c.oid = t.attrelid
          AND a.privilege_type = 'INSERT' AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('REVOKE INSERT ON queue_history_deltas FROM %s', role_name);
        EXECUTE format('REVOKE INSERT (queue, minute, counter, bucket, delta) '
                       'ON queue_history_deltas FROM %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'job_attempts'::regclass AND t.attname = 'job_id'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT (queue, due_at) ON job_attempts TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
