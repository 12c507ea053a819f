-- `leasectl errors` reads its window from one index alone (design.md, "Errors and events").
-- {schema} is the quoted schema name.
--
-- Before this, each failure it read cost a fetch of its attempt's row (for the error's first
-- line and whether a traceback was kept) and a probe of jobs' primary key (for the queue): at
-- 10,000 failures beside 12M jobs, about 260 ms, nearly all of it pages of jobs and
-- job_attempts read one at a time (BENCHMARKS.md, "errors"). A failed attempt now carries
-- what `errors` groups it by, written by the worker's job_fail in the statement that records
-- the failure (the failure path only: a success writes neither):
-- * error_kind: the attempt's group, as core/errorgroups.py's `attempt_kind` makes it in the
--   worker (Python's normalisation stays its one definition: the SQL only groups equal kinds);
-- * queue: its job's queue (a job never changes queue), taken from the jobs row job_fail
--   updates, never from the worker.
-- Both are NULL for the attempts that failed before this version, or under an older worker:
-- `errors` reads those as it did before (their row and their job), and groups them in Python.
-- Adding two NULL columns rewrites nothing.
ALTER TABLE {schema}.job_attempts ADD COLUMN queue text, ADD COLUMN error_kind text;

-- Migration 15's bounds, with the two new columns (a worker role writes them: no role may
-- write a value that makes the readers slow). One constraint, not two: every UPDATE of
-- job_attempts (each completion) checks each CHECK constraint anew. NOT VALID, as before: the
-- rows already there hold NULLs in both.
ALTER TABLE {schema}.job_attempts DROP CONSTRAINT job_attempts_bounded_values;
ALTER TABLE {schema}.job_attempts ADD CONSTRAINT job_attempts_bounded_values CHECK (
    char_length(lease_owner) <= 400 AND char_length(error) <= 4000
    AND char_length(queue) <= 200 AND char_length(error_kind) <= 200
) NOT VALID;

-- Migration 22's index, in two: the failures stored with a kind, covering (their job, queue
-- and kind from the index alone: an index-only scan wherever the visibility map says the page
-- is all-visible, all but the last minutes' pages), and the ones stored without (the history
-- before this version, which only shrinks, and an older worker's failures), read as before.
-- `errors` reads the newest of both in one ordered merge. Still partial: only failures are in
-- them, and an attempt enters one of them once, when its failure is written.
DROP INDEX {schema}.job_attempts_failed_idx;
CREATE INDEX job_attempts_failed_idx ON {schema}.job_attempts (ended_at)
    INCLUDE (job_id, queue, error_kind) WHERE outcome = 'failed' AND error_kind IS NOT NULL;
CREATE INDEX job_attempts_failed_unkinded_idx ON {schema}.job_attempts (ended_at)
    WHERE outcome = 'failed' AND error_kind IS NULL;

-- Workers granted by an older leasectl keep failing jobs after this upgrade (job_fail now
-- writes both): whoever may update job_attempts.error may update them. As in migration 8.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'job_attempts'::regclass AND t.attname = 'error'
          AND a.privilege_type = 'UPDATE' AND a.grantee <> 0
          AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'job_attempts'::regclass)
    LOOP
        EXECUTE format('GRANT UPDATE (queue, error_kind) ON job_attempts TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();

-- The recount of thinly sampled Pending counts (core/counts.py, RECOUNT_CAP and
-- RECOUNT_BUDGET), for every read that estimates a queue's Pending jobs past its cap: the
-- console's refresh, the metrics scrape (and `status`, whose statement does the same inline).
-- A queue estimated at p_cap or fewer (a thin sample: the estimate may be off by a quarter) is
-- counted again, exactly, up to p_cap, with its due jobs (p_due_at, when given); the smallest
-- estimates first, while their sum stays within p_budget; the others are left to their
-- estimate. A NULL queue is every queue's Pending jobs together (the console without a
-- filter). As its caller (SECURITY INVOKER: it reads what the caller may read), EXECUTE
-- PUBLIC's, as estimate_jobs. Its statements name the status, so that the partial claim index
-- serves them in any plan.
CREATE FUNCTION {schema}.pending_recount(
    p_queues text[], p_estimates bigint[], p_due_at timestamptz, p_cap bigint, p_budget bigint
) RETURNS TABLE (recount_queue text, recounted bigint, recounted_due bigint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    spent bigint := 0;
    estimate bigint;
BEGIN
    FOR recount_queue, estimate IN
        SELECT u.q, u.e FROM unnest(p_queues, p_estimates) AS u(q, e)
        WHERE u.e <= p_cap
        ORDER BY u.e, u.q
    LOOP
        spent := spent + estimate;
        EXIT WHEN spent > p_budget;
        IF recount_queue IS NULL THEN
            SELECT count(*) INTO recounted
            FROM (SELECT 1 FROM jobs AS j WHERE j.status = 'Pending' LIMIT p_cap + 1) AS x;
        ELSE
            SELECT count(*) INTO recounted
            FROM (SELECT 1 FROM jobs AS j
                  WHERE j.status = 'Pending' AND j.queue = recount_queue
                  LIMIT p_cap + 1) AS x;
        END IF;
        recounted_due := NULL;
        -- Only below the cap: then there are at most p_cap Pending jobs to walk.
        IF recounted <= p_cap AND p_due_at IS NOT NULL THEN
            IF recount_queue IS NULL THEN
                SELECT count(*) INTO recounted_due
                FROM jobs AS j WHERE j.status = 'Pending' AND j.run_at <= p_due_at;
            ELSE
                SELECT count(*) INTO recounted_due
                FROM jobs AS j
                WHERE j.status = 'Pending' AND j.queue = recount_queue
                  AND j.run_at <= p_due_at;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
