-- The trace context of the span that enqueued a job (docs/tracing.md), so that the handler's
-- span continues its trace. {schema} is the quoted schema name.
--
-- trace_context: what OpenTelemetry's propagator wrote for the enqueuing span (by default the
-- W3C `traceparent` and `tracestate`), as a JSON object of strings; NULL when no span was
-- current or OpenTelemetry is not in use. Written by enqueue (a producer role), read by the
-- claims (`RETURNING j.*`), never updated. Untrusted like any column a role may write: the
-- worker ignores a value it cannot read (core/tracing.py).
-- Bounded by its type, as unique_key (migration 12): no CHECK for every UPDATE of jobs (the
-- claims, heartbeats, completions, none of which touches this column) to evaluate again.
-- (No default: no table rewrite.)
ALTER TABLE {schema}.jobs ADD COLUMN trace_context varchar(1024);

-- Roles granted by an older leasectl keep enqueuing after this upgrade (the enqueue statement
-- names the column): a role that may INSERT a job's timeout (a producer, migration 21) may
-- give its trace context. Workers read it through their SELECT on the whole table.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'timeout'
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT (trace_context) ON jobs TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
