-- The attempt history without a per-row foreign key check. {schema} is the quoted schema name.
-- A foreign key makes every attempt row a claim opens run a referential check: a query and a
-- row lock on the job the same statement has just updated. That is ~10% of the server's work
-- per job on the claim path (measured: single-job and drain at c=50, A/B, BENCHMARKS.md). The
-- check guards against nothing here: attempt rows are only ever inserted by the statement that
-- leases their job, from the row it has just locked and updated. What the key also did, delete
-- a job's attempts with the job, is kept: one statement-level trigger per DELETE on jobs
-- (`prune`, or an owner's manual DELETE), with the deleted ids in a transition table. Like the
-- key's cascade, it deletes with the rights of the schema's owner (SECURITY DEFINER, with a
-- fixed search_path): whoever may delete a job takes its attempts with it.
ALTER TABLE {schema}.job_attempts DROP CONSTRAINT IF EXISTS job_attempts_job_id_fkey;

CREATE FUNCTION {schema}.jobs_delete_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    -- (The schema is named in the search_path above, never inside this quoted body.)
    -- `= ANY (ARRAY(...))`: the attempts' primary key probed per deleted id, whatever the
    -- size of the batch or of the history.
    DELETE FROM job_attempts
    WHERE job_id = ANY (ARRAY(SELECT id FROM deleted_jobs));
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_delete_attempts AFTER DELETE ON {schema}.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_delete_attempts();

-- TRUNCATE fires no DELETE trigger; the key made `TRUNCATE jobs` fail unless it cascaded to
-- the attempts. Now it empties them too. (With DELETE: a TRUNCATE here would fail whenever the
-- same command also truncates job_attempts, which is still open then.)
CREATE FUNCTION {schema}.jobs_truncate_attempts() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    DELETE FROM job_attempts;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_truncate_attempts AFTER TRUNCATE ON {schema}.jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.jobs_truncate_attempts();
