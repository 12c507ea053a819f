-- Operators change jobs only through audited operations; the audit records the database role.
-- {schema} is the quoted schema name.
--
-- Before this, an operator role had UPDATE on every column of jobs, UPDATE on job_attempts and
-- INSERT on job_events: it could rewrite a payload or move a job to another queue without a
-- trace, and write audit rows of its own. Now the three operations that change jobs on an
-- operator's behalf (requeue, mark-stuck, the watcher's batch) are functions that run with the
-- rights of the schema's owner (SECURITY DEFINER, EXECUTE revoked from PUBLIC), and `leasectl
-- grant --operator` gives EXECUTE on them and SELECT on the tables, nothing else. Each one
-- changes its jobs, closes their attempts and writes their audit rows in one statement. The
-- store calls them for every caller, the owner too: one path, the one that is tested.
--
-- As in migration 3, the bodies name no schema: each function's search_path is pg_catalog, the
-- schema, pg_temp (pg_catalog first, so that nothing in the schema can stand in for a built-in;
-- pg_temp last, so that no temporary table can stand in for a table). The schema's name is
-- spliced in only outside the quoted bodies: a name holding $$ would end a body.
--
-- The statements are the named queries they replace (queries/operator.sql, watcher.sql), with
-- the same guards, one predicate a line. A later change to one is a new migration that
-- replaces its function.

-- The database role of each audited change, beside `actor` (the name the client gives: an
-- operator's login name, a watcher's host and pid). session_user is the role that logged in,
-- also inside a SECURITY DEFINER function (current_user is the owner there), and only a
-- superuser can change it. Rows written before this migration keep NULL: who wrote them was
-- not recorded (a default on ADD COLUMN would stamp them all with the role running the
-- migration). Every new row has one: the check holds from now on (NOT VALID spares old rows).
ALTER TABLE {schema}.job_events ADD COLUMN db_role text;
ALTER TABLE {schema}.job_events ALTER COLUMN db_role SET DEFAULT session_user;
ALTER TABLE {schema}.job_events ADD CONSTRAINT job_events_db_role_recorded
    CHECK (db_role IS NOT NULL) NOT VALID;

-- Operator requeue, guarded by the state the operator saw (status, attempts, lease_owner).
-- A live lease is only overridden with force. Failed jobs get one more attempt of budget.
-- Returns the ids it moved.
CREATE FUNCTION {schema}.jobs_operator_requeue(
    seen_ids bigint[], seen_statuses text[], seen_attempts integer[], seen_owners text[],
    force boolean, actor_name text, audit_reason text
) RETURNS TABLE (id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH seen AS (
    SELECT * FROM unnest(seen_ids, seen_statuses, seen_attempts, seen_owners)
        AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.max_attempts, j.lease_owner, j.lease_until,
           j.heartbeat_at, j.run_at
    FROM jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status
      AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Processing', 'Stuck', 'Failed')
      AND (force OR j.status <> 'Processing' OR j.lease_until < now())
    FOR UPDATE OF j
), moved AS (
    UPDATE jobs AS j
    SET status = 'Pending', run_at = now(), lease_until = NULL, finished_at = NULL,
        -- One more attempt of budget, within migration 5's bound on max_attempts (1000).
        max_attempts = GREATEST(j.max_attempts, LEAST(j.attempts + 1, 1000)),
        updated_at = now()
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.max_attempts, j.run_at,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'max_attempts', t.max_attempts, 'lease_owner', t.lease_owner,
                                 'lease_until', t.lease_until, 'heartbeat_at', t.heartbeat_at)
                  AS before
), closed AS (
    UPDATE job_attempts AS a
    SET outcome = 'requeued', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'requeued by ' || actor_name
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, actor_name, CASE WHEN force THEN 'requeue_forced' ELSE 'requeue' END,
           audit_reason, m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'max_attempts', m.max_attempts, 'run_at', m.run_at)
    FROM moved AS m
)
SELECT moved.id FROM moved ORDER BY moved.id;
$$;

-- Operator quarantine (-> Stuck) of Pending or expired Processing jobs, guarded like requeue.
-- Returns the ids it moved.
CREATE FUNCTION {schema}.jobs_operator_mark_stuck(
    seen_ids bigint[], seen_statuses text[], seen_attempts integer[], seen_owners text[],
    force boolean, actor_name text, audit_reason text
) RETURNS TABLE (id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH seen AS (
    SELECT * FROM unnest(seen_ids, seen_statuses, seen_attempts, seen_owners)
        AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.lease_owner, j.lease_until, j.heartbeat_at
    FROM jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status
      AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Processing', 'Pending')
      AND (force OR j.status <> 'Processing' OR j.lease_until < now())
    FOR UPDATE OF j
), moved AS (
    UPDATE jobs AS j
    SET status = 'Stuck', updated_at = now(), last_error = coalesce(audit_reason, j.last_error)
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.lease_until,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'lease_owner', t.lease_owner, 'lease_until', t.lease_until,
                                 'heartbeat_at', t.heartbeat_at) AS before
), closed AS (
    UPDATE job_attempts AS a
    SET outcome = 'marked_stuck', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'marked stuck by ' || actor_name
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, actor_name,
           CASE WHEN force THEN 'mark_stuck_forced' ELSE 'mark_stuck' END, audit_reason,
           m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'lease_until', m.lease_until)
    FROM moved AS m
)
SELECT moved.id FROM moved ORDER BY moved.id;
$$;

-- One watcher batch: expired leases -> Pending (Failed when attempts are spent) or Stuck in
-- mark mode. The expiry is re-checked by the locking read and by the UPDATE itself, so a lease
-- renewed a moment ago is never touched.
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
    detail boolean
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

REVOKE ALL ON FUNCTION {schema}.jobs_operator_requeue FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_operator_mark_stuck FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_requeue_expired FROM PUBLIC;
