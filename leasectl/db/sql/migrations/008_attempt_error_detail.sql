-- A failed attempt keeps the handler's traceback beside its one-line error. {schema} is the
-- quoted schema name.
--
-- error_detail is what traceback.format_exception made of the handler's exception, written by
-- the worker's fenced job_fail in the statement that records the failure (no second round
-- trip); NULL for every other outcome, for a job that failed without running (its values could
-- not be loaded: there is no traceback) and for attempts from before this version.
--
-- Bounded like migration 5's values: at most 16,384 characters of traceback, plus room for the
-- one line the worker puts where it cut a longer one (it keeps the start, where the handler's
-- frames are, and the end, where the exception is; leasectl/runtime/worker.py, cut_middle). A
-- NULL passes the CHECK, so the rows already there need nothing.
ALTER TABLE {schema}.job_attempts
    ADD COLUMN error_detail text,
    ADD CONSTRAINT job_attempts_error_detail_bounded CHECK (char_length(error_detail) <= 16640);

-- Workers granted by an older leasectl keep failing jobs after this upgrade (job_fail now
-- writes error_detail): whoever may update job_attempts.error may update error_detail. As in
-- migration 7, a temporary function, so that the schema is named only in its search_path.
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
        EXECUTE format('GRANT UPDATE (error_detail) ON job_attempts TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
