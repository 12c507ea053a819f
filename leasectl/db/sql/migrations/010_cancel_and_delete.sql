-- Cancel and delete: a terminal status `Cancelled` and the operator's two audited functions
-- that use it. {schema} is the quoted schema name.
--
-- The new enum values. PostgreSQL refuses to use a value added to an enum within the
-- transaction that added it (even when the type is new in that transaction, as in a fresh
-- install), and this migration uses them at once (the index and the functions below). So
-- Database.migrate runs these two lines first, after the migrations before this one, and
-- commits; it then runs this file in a new transaction, where, IF NOT EXISTS, they are no-ops.
-- A value added and not used (the rest failed) is harmless: no row has it.
ALTER TYPE {schema}.job_status ADD VALUE IF NOT EXISTS 'Cancelled';
ALTER TYPE {schema}.attempt_outcome ADD VALUE IF NOT EXISTS 'cancelled';

-- The finished history: Cancelled is finished too (throughput, prune, `list --state
-- cancelled`). The index of migration 1 is made again with Cancelled in its predicate (one
-- index, in finish order, so that prune's oldest-first batch stays one ordered index walk;
-- queries that name only Completed and Failed are still served: their predicate implies this
-- one). Building it reads the table once, in this transaction.
DROP INDEX {schema}.jobs_finished_idx;
CREATE INDEX jobs_finished_idx ON {schema}.jobs (finished_at)
    WHERE status IN ('Completed', 'Failed', 'Cancelled');
-- `list --state cancelled` (the console's find too), newest first: cancelled jobs are few among
-- the finished ones, and the finished-history index would walk them all to find a page. This
-- one holds only them (no other status change writes to it), in id order.
CREATE INDEX jobs_cancelled_idx ON {schema}.jobs (id) WHERE status = 'Cancelled';

-- Operator cancel, guarded by the state the operator saw (status, attempts, lease_owner), as
-- migration 6's requeue. Pending and Stuck jobs are cancelled at once; a Processing job (a live
-- lease or a lapsed one, with or without force: cancelling is what the operator asked for) is
-- cancelled with its lease revoked: the status is no longer Processing, so the holder's next
-- heartbeat, completion, failure or release is refused by its fence, and its open attempt
-- closes as `cancelled`. Completed, Failed and Cancelled jobs are finished already: skipped.
-- `force` is there for the shape shared by the operator actions; it changes nothing here.
-- lease_owner is kept (who held the job last), lease_until is cleared. Returns the ids it
-- cancelled.
CREATE FUNCTION {schema}.jobs_operator_cancel(
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
      AND j.status IN ('Pending', 'Processing', 'Stuck')
    FOR UPDATE OF j
), moved AS (
    UPDATE jobs AS j
    SET status = 'Cancelled', lease_until = NULL, finished_at = now(), updated_at = now()
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.finished_at,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'lease_owner', t.lease_owner, 'lease_until', t.lease_until,
                                 'heartbeat_at', t.heartbeat_at) AS before
), closed AS (
    UPDATE job_attempts AS a
    SET outcome = 'cancelled', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'cancelled by ' || actor_name
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, actor_name, 'cancel', audit_reason, m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'finished_at', m.finished_at)
    FROM moved AS m
)
SELECT moved.id FROM moved ORDER BY moved.id;
$$;

-- Operator delete of Completed, Failed, Cancelled or Stuck jobs, guarded like cancel. Never a
-- Pending or a Processing job, not even one whose lease lapsed (cancel it first, or requeue or
-- mark it stuck): a job someone may still run is not deleted under them. The job's attempts go
-- with it (migration 3's trigger); its audit events stay (job_events has no key to jobs), and
-- a `delete` event is written with what the job was (its columns but the payload, which is not
-- kept: deleting a job deletes its data). `force` changes nothing, as for cancel. Returns the
-- ids it deleted.
CREATE FUNCTION {schema}.jobs_operator_delete(
    seen_ids bigint[], seen_statuses text[], seen_attempts integer[], seen_owners text[],
    force boolean, actor_name text, audit_reason text
) RETURNS TABLE (id bigint)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
WITH seen AS (
    SELECT * FROM unnest(seen_ids, seen_statuses, seen_attempts, seen_owners)
        AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id
    FROM jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status
      AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Completed', 'Failed', 'Cancelled', 'Stuck')
    FOR UPDATE OF j
), deleted AS (
    DELETE FROM jobs AS j
    USING target AS t
    WHERE j.id = t.id
    RETURNING j.id,
              jsonb_build_object('status', j.status, 'queue', j.queue, 'attempts', j.attempts,
                                 'max_attempts', j.max_attempts, 'priority', j.priority,
                                 'lease_owner', j.lease_owner, 'last_error', j.last_error,
                                 'created_at', j.created_at, 'finished_at', j.finished_at)
                  AS before
), events AS (
    INSERT INTO job_events (job_id, actor, action, reason, before, after)
    SELECT d.id, actor_name, 'delete', audit_reason, d.before, NULL
    FROM deleted AS d
)
SELECT deleted.id FROM deleted ORDER BY deleted.id;
$$;

REVOKE ALL ON FUNCTION {schema}.jobs_operator_cancel FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.jobs_operator_delete FROM PUBLIC;

-- Operators granted by an older leasectl cancel and delete after this upgrade with no second
-- `leasectl grant`: whoever may run the operator's requeue may run both. As in migration 7, a
-- temporary function, so that the schema is named only in its search_path.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'jobs_operator_requeue'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION jobs_operator_cancel, jobs_operator_delete TO %s',
                       role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
