-- Snooze, per-job timeouts and progress (docs/design.md, "Snooze, timeouts and progress").
-- {schema} is the quoted schema name.
--
-- A snoozed attempt's outcome. Database.migrate commits this line first (a transaction cannot
-- use an enum value it added), then runs the rest of the file in a new transaction.
ALTER TYPE {schema}.attempt_outcome ADD VALUE IF NOT EXISTS 'snoozed';

-- snoozes: how many times the job's handlers snoozed it (each time: back to Pending, its
-- max_attempts one higher, so that the attempt is not spent; attempts, the fencing token, never
-- goes back). timeout: how long one attempt's handler may run (NULL: no limit but the lease's).
-- progress, progress_message: what the running handler last reported (ctx.progress), carried
-- by the worker's heartbeats, cleared by the next claim. The message is bounded by its type.
-- (Constant defaults: no table rewrite.)
ALTER TABLE {schema}.jobs
    ADD COLUMN snoozes integer NOT NULL DEFAULT 0,
    ADD COLUMN timeout interval,
    ADD COLUMN progress real,
    ADD COLUMN progress_message varchar(200);

-- One constraint for the three (core/config.py: MAX_SNOOZES, MAX_TIMEOUT). NOT VALID: the rows
-- already there hold the defaults, which pass; every row written from now on is checked, and no
-- scan of the table runs under this migration's lock.
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_run_bounds CHECK (
    snoozes BETWEEN 0 AND 100
    AND (timeout IS NULL OR (timeout >= interval '1 second' AND timeout <= interval '7 days'))
    AND (progress IS NULL OR (progress >= 0 AND progress <= 1))
) NOT VALID;

-- Roles granted by an older leasectl keep working after this upgrade: workers (who may UPDATE
-- jobs' status) write progress with every heartbeat and clear it with every claim, and a snooze
-- writes snoozes and max_attempts; producers (who may INSERT a job's concurrency_key) may give
-- a timeout.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'status'
          AND a.privilege_type = 'UPDATE'
    LOOP
        EXECUTE format('GRANT UPDATE (snoozes, max_attempts, progress, progress_message) '
                       'ON jobs TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'concurrency_key'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT (timeout) ON jobs TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
