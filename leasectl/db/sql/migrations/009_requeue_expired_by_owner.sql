-- The watcher's batch of migration 6, for one lease owner: `leasectl requeue-stuck --owner
-- OWNER` requeues (or quarantines) the expired leases of that worker only, as a watcher pass
-- (the jobs go back with the budget they had, their attempts end as `expired`, the audit rows
-- say `requeue`, `fail` or `mark_stuck`), not as the operator's requeue of named jobs (which
-- raises max_attempts). {schema} is the quoted schema name; as in migration 6, it is spliced in
-- only outside the quoted bodies, which name no schema (each function's search_path has it).
--
-- The function is dropped and created again with one more parameter, `only_owner` (NULL: every
-- owner, as before), rather than overloaded: `leasectl grant` names the function without its
-- arguments, which fails when two functions have the name. Everything else is migration 6's
-- function as it was: the statement, its planner settings, SECURITY DEFINER, no EXECUTE for
-- PUBLIC. The owner is checked where the expiry is, by the locking read and by the UPDATE.
--
-- Dropping a function drops its grants: the roles that could run the old one (operators granted
-- by an older leasectl) are read first, into a temporary table, and granted the new one at the
-- end, so they keep running `watch` and `requeue-stuck` with no second `leasectl grant`. The
-- temporary functions name the schema only in their search_path, never inside a quoted body.
CREATE FUNCTION pg_temp.leasectl_requeue_expired_runners() RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT DISTINCT a.grantee::regrole::text
    FROM pg_proc p, aclexplode(p.proacl) a
    WHERE p.oid = 'jobs_requeue_expired'::regproc AND a.privilege_type = 'EXECUTE'
      AND a.grantee NOT IN (0, p.proowner);
END
$$;
CREATE TEMPORARY TABLE leasectl_requeue_expired_runners AS
    SELECT r AS role_name FROM pg_temp.leasectl_requeue_expired_runners() AS r;
DROP FUNCTION pg_temp.leasectl_requeue_expired_runners();

DROP FUNCTION {schema}.jobs_requeue_expired;

-- One watcher batch: expired leases (of one owner, with `only_owner`) -> Pending (Failed when
-- attempts are spent) or Stuck in mark mode. The expiry and the owner are re-checked by the
-- locking read and by the UPDATE itself, so a lease renewed, or taken over by another worker, a
-- moment ago is never touched. The owner condition is a filter on the walk of the Processing
-- index (the plan is one generic plan for every call, with or without an owner): the walk reads
-- the Processing set, which the fleet's concurrency bounds, never the finished history.
--
-- Planner settings for the function's statement (SET clauses: they hold while it runs): index
-- paths and nested loops. The batch must find expired leases through the Processing index
-- (stopping after one batch of them) and update them by primary key, whatever the table's
-- size, layout and statistics; left to itself the planner picked, depending on those, a
-- sequential scan (the pass's last batch then read the whole table) or a join that read every
-- expired lease for each batch (a backlog of n leases then cost n squared / batch size row
-- reads). And one plan for every batch (PL/pgSQL keeps it for the session): with the shape
-- fixed, planning each batch again (a custom plan per execution) was 4 per cent of a pass.
-- `#variable_conflict use_column`: the result's column names are also PL/pgSQL variables;
-- inside the statement such a name means the column.
CREATE FUNCTION {schema}.jobs_requeue_expired(
    batch_limit integer, only_queue text, mark boolean, actor_name text, audit_reason text,
    detail boolean, only_owner text DEFAULT NULL
) RETURNS TABLE (
    id bigint, status text, n bigint, queue text, attempts integer, max_attempts integer,
    lease_owner text, lease_until timestamptz, heartbeat_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT id, status, attempts, lease_owner, lease_until, heartbeat_at
        FROM jobs
        WHERE status = 'Processing'
          AND lease_until < now()
          AND (only_queue IS NULL OR queue = only_queue)
          AND (only_owner IS NULL OR lease_owner = only_owner)
        -- No ORDER BY: lease_until is not indexed (heartbeats stay HOT), and sorting every
        -- expired lease for each batch would make a large backlog slow to clear. Every
        -- expired lease is moved within one pass anyway.
        LIMIT batch_limit
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE jobs AS j
        SET status = (CASE WHEN mark THEN 'Stuck'
                           WHEN j.attempts >= j.max_attempts THEN 'Failed'
                           ELSE 'Pending' END)::job_status,
            lease_until = CASE WHEN mark THEN j.lease_until END,
            run_at = CASE WHEN mark THEN j.run_at ELSE now() END,
            finished_at = CASE WHEN NOT mark AND j.attempts >= j.max_attempts THEN now() END,
            last_error = 'lease expired at ' || to_char(e.lease_until AT TIME ZONE 'UTC',
                         'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' (owner ' || e.lease_owner || ')',
            updated_at = now()
        FROM expired AS e
        WHERE j.id = e.id
          AND j.status = 'Processing'
          AND j.lease_until < now()
          AND (only_owner IS NULL OR j.lease_owner = only_owner)
        -- The state before the change travels along, so that no CTE join is needed below.
        RETURNING j.id, j.queue, j.status, j.attempts, j.max_attempts, j.run_at, j.lease_until,
                  e.status AS before_status, e.lease_owner AS before_owner,
                  e.lease_until AS before_lease_until, e.heartbeat_at AS before_heartbeat_at
    ), closed AS (
        UPDATE job_attempts AS a
        SET outcome = 'expired', ended_at = now(), heartbeat_at = m.before_heartbeat_at,
            error = 'lease expired; ' || actor_name || ' moved the job to ' || m.status::text
        FROM moved AS m
        WHERE a.job_id = m.id AND a.attempt = m.attempts AND a.outcome = 'running'
    ), events AS (
        -- Each document from the columns of a lateral subquery: to_jsonb of a row costs half
        -- of jsonb_build_object, which looks up how to convert each argument on every call.
        INSERT INTO job_events (job_id, actor, action, reason, before, after)
        SELECT m.id, actor_name,
               CASE m.status WHEN 'Pending' THEN 'requeue'
                             WHEN 'Stuck' THEN 'mark_stuck' ELSE 'fail' END,
               audit_reason, to_jsonb(b), to_jsonb(a)
        FROM moved AS m
        CROSS JOIN LATERAL (
            SELECT m.before_status AS status, m.attempts, m.before_owner AS lease_owner,
                   m.before_lease_until AS lease_until, m.before_heartbeat_at AS heartbeat_at
        ) AS b
        CROSS JOIN LATERAL (
            SELECT m.status, m.attempts, m.lease_until, m.run_at
        ) AS a
    )
    -- The moved jobs, one row each (`detail`); or, for a pass that only counts what it moved
    -- (the `watch` daemon; requeue-stuck's table once it has the jobs it lists), one row per
    -- new status with its count (n). A row per moved job, even of two columns, cost the server
    -- 6 per cent of a pass and the client a third of its CPU time (BENCHMARKS.md).
    SELECT m.id, m.status::text AS status, 1::bigint AS n, m.queue, m.attempts,
           m.max_attempts, m.before_owner AS lease_owner, m.before_lease_until AS lease_until,
           m.before_heartbeat_at AS heartbeat_at
    FROM moved AS m
    WHERE detail
    UNION ALL
    SELECT NULL, m.status::text, count(*), NULL, NULL, NULL, NULL, NULL, NULL
    FROM moved AS m
    WHERE NOT detail
    GROUP BY m.status
    ORDER BY lease_until, id;
END
$$;

REVOKE ALL ON FUNCTION {schema}.jobs_requeue_expired FROM PUBLIC;

CREATE FUNCTION pg_temp.leasectl_grant_requeue_expired() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    runner text;
BEGIN
    FOR runner IN SELECT r.role_name FROM pg_temp.leasectl_requeue_expired_runners AS r LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION jobs_requeue_expired TO %s', runner);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_grant_requeue_expired();
DROP FUNCTION pg_temp.leasectl_grant_requeue_expired();
DROP TABLE pg_temp.leasectl_requeue_expired_runners;
