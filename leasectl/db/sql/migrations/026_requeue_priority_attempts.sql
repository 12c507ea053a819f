-- The operator's requeue with intent: `leasectl requeue --priority N --attempts N` (ids or a
-- filter; the console's requeue dialog). {schema} is the quoted schema name; as in migration 6,
-- it is spliced in only outside the quoted bodies, which name no schema.
--
-- Two parameters, both NULL by default (an older leasectl's call, with seven arguments, does
-- what it did):
-- * new_priority: the job's new priority (smaller runs first: the claim walks
--   jobs_claimable_idx in (queue, priority, run_at, id) order, and a key's Waiting jobs are
--   promoted in that order too). Bounded by its type (integer), as enqueue's is.
-- * more_attempts: a fresh attempt budget, N more attempts from now: max_attempts := attempts
--   + N (N taken within 1 to 1000; the sum within migration 5's bound, 1000). The attempt
--   counter itself never goes back: it is the lease's fencing token. Without it, as before,
--   a spent budget gets one more attempt.
-- The job event's before and after record priority and max_attempts, whether they changed or
-- not.
--
-- The function is dropped and created again rather than overloaded (`leasectl grant` names it
-- without its arguments, which fails when two functions have the name), as migration 9 did:
-- dropping a function drops its grants, so the roles that could run the old one are read
-- first, into a temporary table, and granted the new one at the end (no second `leasectl
-- grant`). The statement is migration 6's, with the same guards, one predicate a line.
CREATE FUNCTION pg_temp.leasectl_operator_requeue_runners() RETURNS SETOF text
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT DISTINCT a.grantee::regrole::text
    FROM pg_proc p, aclexplode(p.proacl) a
    WHERE p.oid = 'jobs_operator_requeue'::regproc AND a.privilege_type = 'EXECUTE'
      AND a.grantee NOT IN (0, p.proowner);
END
$$;
CREATE TEMPORARY TABLE leasectl_operator_requeue_runners AS
    SELECT r AS role_name FROM pg_temp.leasectl_operator_requeue_runners() AS r;
DROP FUNCTION pg_temp.leasectl_operator_requeue_runners();

DROP FUNCTION {schema}.jobs_operator_requeue;

-- Operator requeue, guarded by the state the operator saw (status, attempts, lease_owner).
-- A live lease is only overridden with force. Returns the ids it moved.
CREATE FUNCTION {schema}.jobs_operator_requeue(
    seen_ids bigint[], seen_statuses text[], seen_attempts integer[], seen_owners text[],
    force boolean, actor_name text, audit_reason text,
    new_priority integer DEFAULT NULL, more_attempts integer DEFAULT NULL
) RETURNS TABLE (id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH seen AS (
    SELECT * FROM unnest(seen_ids, seen_statuses, seen_attempts, seen_owners)
        AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.max_attempts, j.priority, j.lease_owner,
           j.lease_until, j.heartbeat_at, j.run_at
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
        priority = COALESCE(new_priority, j.priority),
        -- N more attempts from now (N within 1..1000); without N, one more attempt of budget.
        -- Both within migration 5's bound on max_attempts (1000).
        max_attempts = CASE
            WHEN more_attempts IS NULL
                THEN GREATEST(j.max_attempts, LEAST(j.attempts + 1, 1000))
            ELSE LEAST(j.attempts + LEAST(GREATEST(more_attempts, 1), 1000), 1000)
        END,
        updated_at = now()
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.max_attempts, j.priority, j.run_at,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'max_attempts', t.max_attempts, 'priority', t.priority,
                                 'lease_owner', t.lease_owner, 'lease_until', t.lease_until,
                                 'heartbeat_at', t.heartbeat_at)
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
                              'max_attempts', m.max_attempts, 'priority', m.priority,
                              'run_at', m.run_at)
    FROM moved AS m
)
SELECT moved.id FROM moved ORDER BY moved.id;
$$;

REVOKE ALL ON FUNCTION {schema}.jobs_operator_requeue FROM PUBLIC;

CREATE FUNCTION pg_temp.leasectl_grant_operator_requeue() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    runner text;
BEGIN
    FOR runner IN SELECT r.role_name FROM pg_temp.leasectl_operator_requeue_runners AS r LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION jobs_operator_requeue TO %s', runner);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_grant_operator_requeue();
DROP FUNCTION pg_temp.leasectl_grant_operator_requeue();
DROP TABLE pg_temp.leasectl_operator_requeue_runners;
