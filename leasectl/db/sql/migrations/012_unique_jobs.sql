-- Unique jobs: a producer may give a job a key, and a queue holds at most one live job
-- (Pending, Processing or Stuck) per key. {schema} is the quoted schema name.
--
-- The key's length is bounded by its type, not by a CHECK: every UPDATE of jobs evaluates
-- every CHECK constraint of the table again (migration 5), and the claims, heartbeats and
-- completions never touch this column, so a CHECK would cost each of them for nothing, while a
-- varchar's length is checked only where a value is written. 200 characters, as a queue name:
-- the index entry (queue, unique_key) stays far below a btree entry's limit (about 2,700 bytes).
-- A nullable column without a default: adding it rewrites nothing.
ALTER TABLE {schema}.jobs ADD COLUMN unique_key varchar(200);

-- At most one live job per (queue, unique_key). Jobs without a key (NULL) are not in it, so it
-- holds only keyed live jobs; a finished job (Completed, Failed, Cancelled) leaves it and no
-- longer blocks a new job with its key. The enqueue's INSERT ... ON CONFLICT names this
-- predicate. A job requeued from Failed while a new job with its key is live is refused by it.
CREATE UNIQUE INDEX jobs_unique_key_idx ON {schema}.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('Pending', 'Processing', 'Stuck');

-- Producers granted by an older leasectl keep enqueueing after this upgrade (jobs_enqueue now
-- writes unique_key and looks up the live job that has a key): whoever may insert a job's
-- payload may insert its unique_key and read the columns of that lookup, as `leasectl grant
-- --producer` now grants. As in migration 8, a temporary function, so that the schema is
-- named only in its search_path.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'payload'
          AND a.privilege_type = 'INSERT' AND a.grantee <> 0
          AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass)
    LOOP
        EXECUTE format(
            'GRANT INSERT (unique_key), SELECT (id, queue, unique_key, status) ON jobs TO %s',
            role_name
        );
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
