-- What an incident asks of the history (`leasectl errors`, design.md, "Errors and events").
--
-- The failed attempts by the time they ended, newest first: `errors` reads the last ones of a
-- window through it, whatever the size of job_attempts (10M finished jobs: without it, a scan
-- of every attempt). Partial: only failures, a small part of the attempts, are in it, and an
-- attempt enters it once, when its failure is written (a running attempt's heartbeat does not
-- touch it: outcome and ended_at change together, once).
CREATE INDEX job_attempts_failed_idx ON {schema}.job_attempts (ended_at)
    WHERE outcome = 'failed';

-- Counts past the exact bound (core/counts.py) are estimated (design.md, "Estimated counts"):
-- what the planner expects `SELECT 1 FROM jobs WHERE status = S AND queue = Q [AND run_at <= T]`
-- to return, which is the bounded count's own predicate without its LIMIT. Costs a plan, never
-- a scan: a few hundred microseconds at any size.
--
-- The planner multiplies the selectivities of the queue and the status as if they were
-- independent: with one queue holding the backlog (2M Pending payments jobs beside 10M finished
-- mail jobs) that is off by a factor of several. Statistics on the pair (a most-common-values
-- list of (queue, status)) give it the pair's own frequency, from ANALYZE's sample of the table
-- (autovacuum's ANALYZE keeps it current). Its target of 1,000 makes that sample 300,000 rows:
-- a (queue, status) of 3,000 rows among 12M is then ~75 of them, estimated within about 10%
-- (at the default 100, 7 rows: off by half); the price is a longer ANALYZE of jobs (7 s instead
-- of 1 s at 12M rows, BENCHMARKS.md, "estimated counts").
CREATE STATISTICS {schema}.jobs_queue_status (mcv) ON queue, status FROM {schema}.jobs;
ALTER STATISTICS {schema}.jobs_queue_status SET STATISTICS 1000;

-- The estimate. As its caller (SECURITY INVOKER): EXPLAIN needs SELECT on jobs, so it tells a
-- role only what that role could count itself; EXECUTE stays PUBLIC's for that reason (every
-- role that reads status, the console or the exporter calls it, whichever version granted it).
-- Values go in as literals (format's %L): EXPLAIN takes no parameters, and the planner must see
-- the values to use their statistics. VOLATILE: PostgreSQL runs EXPLAIN in no other kind of
-- function (it reads nothing but the catalog, and writes nothing).
CREATE FUNCTION {schema}.estimate_jobs(
    p_status {schema}.job_status, p_queue text DEFAULT NULL, p_due_at timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    statement text := format('EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs WHERE status = %L',
                             p_status);
    plan json;
BEGIN
    -- A table never analyzed has no statistics: the planner's defaults are no estimate (NULL:
    -- the count stays a lower bound). pg_stats shows a role the columns it may read.
    IF NOT EXISTS (
        SELECT 1 FROM pg_stats AS s JOIN pg_class AS c ON c.relname = s.tablename
        JOIN pg_namespace AS n ON n.oid = c.relnamespace AND n.nspname = s.schemaname
        WHERE c.oid = 'jobs'::regclass AND s.attname = 'status'
    ) THEN
        RETURN NULL;
    END IF;
    IF p_queue IS NOT NULL THEN  -- NULL: every queue's
        statement := statement || format(' AND queue = %L', p_queue);
    END IF;
    IF p_due_at IS NOT NULL THEN  -- the due ones only
        statement := statement || format(' AND run_at <= %L', p_due_at);
    END IF;
    EXECUTE statement INTO plan;
    RETURN round((plan -> 0 -> 'Plan' ->> 'Plan Rows')::numeric)::bigint;
END
$$;
