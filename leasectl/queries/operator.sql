-- name: jobs_operator_requeue
-- Operator requeue, guarded by the state the operator saw (status, attempts, lease_owner).
-- A live lease is only overridden with force. Failed jobs get one more attempt of budget.
WITH seen AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[],
                         %(owners)s::text[]) AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.max_attempts, j.lease_owner, j.lease_until,
           j.heartbeat_at, j.run_at
    FROM {schema}.jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Processing', 'Stuck', 'Failed')
      AND (%(force)s OR j.status <> 'Processing' OR j.lease_until < now())
    FOR UPDATE OF j
), moved AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Pending', run_at = now(), lease_until = NULL, finished_at = NULL,
        max_attempts = GREATEST(j.max_attempts, j.attempts + 1), updated_at = now()
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.max_attempts, j.run_at,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'max_attempts', t.max_attempts, 'lease_owner', t.lease_owner,
                                 'lease_until', t.lease_until, 'heartbeat_at', t.heartbeat_at)
                  AS before
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'requeued', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'requeued by ' || %(actor)s
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, %(actor)s, CASE WHEN %(force)s THEN 'requeue_forced' ELSE 'requeue' END,
           %(reason)s, m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'max_attempts', m.max_attempts, 'run_at', m.run_at)
    FROM moved AS m
)
SELECT id FROM moved ORDER BY id;

-- name: jobs_operator_mark_stuck
-- Operator quarantine (-> Stuck) of Pending or expired Processing jobs, guarded like requeue.
WITH seen AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(statuses)s::text[], %(attempts)s::integer[],
                         %(owners)s::text[]) AS s(id, status, attempts, lease_owner)
), target AS (
    SELECT j.id, j.status, j.attempts, j.lease_owner, j.lease_until, j.heartbeat_at
    FROM {schema}.jobs AS j JOIN seen AS s ON s.id = j.id
    WHERE j.status::text = s.status AND j.attempts = s.attempts
      AND j.lease_owner IS NOT DISTINCT FROM s.lease_owner
      AND j.status IN ('Processing', 'Pending')
      AND (%(force)s OR j.status <> 'Processing' OR j.lease_until < now())
    FOR UPDATE OF j
), moved AS (
    UPDATE {schema}.jobs AS j
    SET status = 'Stuck', updated_at = now(), last_error = coalesce(%(reason)s, j.last_error)
    FROM target AS t
    WHERE j.id = t.id
    RETURNING j.id, j.status, j.attempts, j.lease_until,
              jsonb_build_object('status', t.status, 'attempts', t.attempts,
                                 'lease_owner', t.lease_owner, 'lease_until', t.lease_until,
                                 'heartbeat_at', t.heartbeat_at) AS before
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'marked_stuck', ended_at = now(), heartbeat_at = t.heartbeat_at,
        error = 'marked stuck by ' || %(actor)s
    FROM target AS t
    WHERE a.job_id = t.id AND a.attempt = t.attempts AND a.outcome = 'running'
), events AS (
    INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, %(actor)s,
           CASE WHEN %(force)s THEN 'mark_stuck_forced' ELSE 'mark_stuck' END, %(reason)s,
           m.before,
           jsonb_build_object('status', m.status, 'attempts', m.attempts,
                              'lease_until', m.lease_until)
    FROM moved AS m
)
SELECT id FROM moved ORDER BY id;
