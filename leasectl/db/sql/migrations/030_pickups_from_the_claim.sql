-- The history's pickups are written by the statements that open attempts, not by a trigger
-- (design.md, "History"). {schema} is the quoted schema name.
--
-- Migration 20 counted each attempt opened with a statement-level trigger on job_attempts: a
-- call per claim statement (an empty claim too), a transition table of the new attempts, and
-- a probe of jobs' primary key per attempt for its queue and when it became due. It was most of
-- what the history cost a worker's round trip (BENCHMARKS.md, "This round's costs"). The three
-- claims (jobs_complete_and_claim, jobs_claim_expired, job_claim_by_id) hold all of it already,
-- in the rows their UPDATE of jobs returns: each now appends its pickups to
-- queue_history_deltas itself, one row per bucket, in a data-modifying CTE of the same
-- statement (no round trip, no hot row: the heap has no index).
--
-- A worker role may therefore INSERT into queue_history_deltas, but only what a claim writes:
-- row-level security lets it append pickups of the current minute (its transaction's), in a
-- bucket history_bucket can make, a claim's worth at most (1,000 jobs), and nothing else: it
-- can forge no enqueued, completed, failed or retried count, nor a minute of the past or the
-- future. (It could already open attempts of any job, each one counted by the trigger: this
-- grants no new power.) The owner, whose SECURITY DEFINER triggers and fold write and delete
-- the other counts, is not subject to the policies; readers see every row, as before.
DROP TRIGGER history_from_attempts_opened ON {schema}.job_attempts;
DROP FUNCTION {schema}.history_from_attempts_opened();

ALTER TABLE {schema}.queue_history_deltas ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_history_deltas_read ON {schema}.queue_history_deltas
    FOR SELECT USING (true);
CREATE POLICY queue_history_deltas_pickups ON {schema}.queue_history_deltas
    FOR INSERT WITH CHECK (
        counter = 'pickup' AND minute = date_trunc('minute', now(), 'UTC')
        AND bucket BETWEEN 0 AND 63 AND delta <= 1000
    );

-- Workers granted by an older leasectl keep claiming after this upgrade (their claims now
-- write the pickups): whoever may run claim_budget (a worker, migration 17) may append them.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'claim_budget'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT INSERT (queue, minute, counter, bucket, delta) '
                       'ON queue_history_deltas TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();

-- `leasectl errors --queue Q` and the console's queue screen read one queue's failures from
-- their own index: before this, the newest failures of every queue were read up to the cap
-- and Q's kept, so that another queue failing faster hid Q's errors entirely. A failed attempt
-- enters one more index, once, when its failure is written; a success enters none (partial).
CREATE INDEX job_attempts_failed_queue_idx ON {schema}.job_attempts (queue, ended_at)
    INCLUDE (job_id, error_kind) WHERE outcome = 'failed' AND error_kind IS NOT NULL;

-- The due backlog the fold samples once a minute is counted to a cap (migration 20): above it,
-- the history said `6,000+` where the console's summary says `~2.0M`. A capped sample now
-- keeps the planner's estimate of the queue's due Pending jobs as `status` and the console
-- make it (estimate_jobs, migration 22: under a millisecond, once a minute per capped queue),
-- when it is above the count, and says so (estimated). A trigger on the sample's row, so that
-- history_fold, which writes it, is not copied for one line. As the table's owner (SECURITY
-- DEFINER): the fold's callers may read what the estimate reads.
ALTER TABLE {schema}.queue_backlog ADD COLUMN estimated boolean NOT NULL DEFAULT false;

CREATE FUNCTION {schema}.history_backlog_estimate() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
AS $$
DECLARE
    estimate bigint;
BEGIN
    IF NEW.capped THEN
        estimate := estimate_jobs('Pending', NEW.queue, statement_timestamp());
        IF estimate > NEW.pending THEN
            NEW.pending := estimate;
            NEW.estimated := true;
        END IF;
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION {schema}.history_backlog_estimate FROM PUBLIC;

CREATE TRIGGER history_backlog_estimate BEFORE INSERT ON {schema}.queue_backlog
    FOR EACH ROW EXECUTE FUNCTION {schema}.history_backlog_estimate();
