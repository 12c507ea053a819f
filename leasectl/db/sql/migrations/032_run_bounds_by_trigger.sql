-- The bounds of snoozes, timeout and progress (migration 21's jobs_run_bounds) checked only by
-- the statements that write them, and a claim that no longer writes progress (design.md,
-- "Snooze, timeouts and progress"). {schema} is the quoted schema name; no function body here
-- names a schema.
--
-- PostgreSQL reads every CHECK constraint of a table from its stored text at each statement
-- that inserts or updates a row of it, whatever columns the statement sets. jobs_run_bounds'
-- text is the longest of jobs': it cost each single-job round trip (one claim statement) about
-- 5% of its server CPU, the whole price of the developer's kit for a handler that uses none of
-- it (BENCHMARKS.md, "This round's costs"). A trigger limited to the three columns is read only
-- by a statement that names one of them in its SET list (an UPDATE OF trigger is skipped, WHEN
-- clause and all, by one that does not), and by every INSERT: enqueues, heartbeats that carry
-- progress (every heartbeat names the column), snoozes. Its WHEN is the constraint's condition
-- negated: a row the CHECK passed (true or NULL) fires nothing; one it refused raises the same
-- SQLSTATE (check_violation) naming jobs_run_bounds. No BEFORE trigger of jobs writes these
-- columns (a change such a trigger made would not be checked: PostgreSQL does not fire column
-- triggers for it).
--
-- So that claims need not write progress, progress now belongs to an attempt: a heartbeat that
-- carries a report writes progress_attempt, the lease's attempt, beside it, and the readers show
-- progress only while progress_attempt is the job's attempts (a new claim's attempt has none).
-- The columns keep the last report of an earlier attempt; progress of an attempt reported
-- before this migration reads as none until the attempt's next report. (Nullable, no default:
-- no table rewrite.)
ALTER TABLE {schema}.jobs ADD COLUMN progress_attempt integer;

ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_run_bounds;

CREATE FUNCTION {schema}.jobs_run_bounds_refused() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'new row for relation "%" violates check constraint "jobs_run_bounds"',
        TG_TABLE_NAME
        USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_run_bounds',
              TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
              DETAIL = 'snoozes is 0 to 100, timeout NULL or 1 second to 7 days, progress NULL '
                       'or 0 to 1.';
END
$$;

CREATE TRIGGER jobs_run_bounds
    BEFORE INSERT OR UPDATE OF snoozes, timeout, progress ON {schema}.jobs
    FOR EACH ROW
    WHEN (NOT (NEW.snoozes BETWEEN 0 AND 100
               AND (NEW.timeout IS NULL
                    OR (NEW.timeout >= interval '1 second' AND NEW.timeout <= interval '7 days'))
               AND (NEW.progress IS NULL OR (NEW.progress >= 0 AND NEW.progress <= 1))))
    EXECUTE FUNCTION {schema}.jobs_run_bounds_refused();

-- Roles granted by an older leasectl keep working after this upgrade: workers (who may UPDATE
-- jobs' progress) write the attempt of the progress they report.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'progress'
          AND a.privilege_type = 'UPDATE'
    LOOP
        EXECUTE format('GRANT UPDATE (progress_attempt) ON jobs TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
