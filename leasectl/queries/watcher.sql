-- name: watcher_batch_plan
-- Set for the watcher batch's transaction only: index paths and nested loops. The batch must
-- find expired leases through the Processing index (stopping after one batch of them) and
-- update them by primary key, whatever the table's size, layout and statistics; left to
-- itself the planner picked, depending on those, a sequential scan (the pass's last batch then
-- read the whole table) or a join that read every expired lease for each batch (a backlog of
-- n leases then cost n squared / batch size row reads). And one plan for every batch: with the
-- shape fixed, planning each batch again (a custom plan per execution) was 4 per cent of a pass.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: jobs_requeue_expired
-- One watcher batch: expired leases -> Pending (Failed when attempts are spent) or Stuck in mark mode.
-- The expiry is re-checked by the locking read and by the UPDATE itself, so a lease renewed a
-- moment ago is never touched.
WITH expired AS (
    SELECT id, status, attempts, lease_owner, lease_until, heartbeat_at
    FROM {schema}.jobs
    WHERE status = 'Processing' AND lease_until < now()
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
    -- No ORDER BY: lease_until is not indexed (heartbeats stay HOT), and sorting every
    -- expired lease for each batch would make a large backlog slow to clear. Every expired
    -- lease is moved within one pass anyway.
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {schema}.jobs AS j
    SET status = (CASE WHEN %(mark)s THEN 'Stuck'
                       WHEN j.attempts >= j.max_attempts THEN 'Failed'
                       ELSE 'Pending' END)::{schema}.job_status,
        lease_until = CASE WHEN %(mark)s THEN j.lease_until END,
        run_at = CASE WHEN %(mark)s THEN j.run_at ELSE now() END,
        finished_at = CASE WHEN NOT %(mark)s AND j.attempts >= j.max_attempts THEN now() END,
        last_error = 'lease expired at ' || to_char(e.lease_until AT TIME ZONE 'UTC',
                     'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ' (owner ' || e.lease_owner || ')',
        updated_at = now()
    FROM expired AS e
    WHERE j.id = e.id AND j.status = 'Processing' AND j.lease_until < now()
    -- The state before the change travels along, so that no CTE join is needed below.
    RETURNING j.id, j.queue, j.status, j.attempts, j.max_attempts, j.run_at, j.lease_until,
              e.status AS before_status, e.lease_owner AS before_owner,
              e.lease_until AS before_lease_until, e.heartbeat_at AS before_heartbeat_at
), closed AS (
    UPDATE {schema}.job_attempts AS a
    SET outcome = 'expired', ended_at = now(), heartbeat_at = m.before_heartbeat_at,
        error = 'lease expired; ' || %(actor)s || ' moved the job to ' || m.status::text
    FROM moved AS m
    WHERE a.job_id = m.id AND a.attempt = m.attempts AND a.outcome = 'running'
), events AS (
    -- Each document from the columns of a lateral subquery: to_jsonb of a row costs half of
    -- jsonb_build_object, which looks up how to convert each argument on every call.
    INSERT INTO {schema}.job_events (job_id, actor, action, reason, before, after)
    SELECT m.id, %(actor)s,
           CASE m.status WHEN 'Pending' THEN 'requeue'
                         WHEN 'Stuck' THEN 'mark_stuck' ELSE 'fail' END,
           %(reason)s, to_jsonb(b), to_jsonb(a)
    FROM moved AS m
    CROSS JOIN LATERAL (
        SELECT m.before_status AS status, m.attempts, m.before_owner AS lease_owner,
               m.before_lease_until AS lease_until, m.before_heartbeat_at AS heartbeat_at
    ) AS b
    CROSS JOIN LATERAL (
        SELECT m.status, m.attempts, m.lease_until, m.run_at
    ) AS a
)
-- The moved jobs, one row each (`detail`); or, for a pass that only counts what it moved (the
-- `watch` daemon; requeue-stuck's table once it has the jobs it lists), one row per new status
-- with its count (n). A row per moved job, even of two columns, cost the server 6 per cent of a
-- pass and the client a third of its CPU time (100,000 jobs, alone, A/B: 2.03 -> 1.90 s and
-- 0.12 -> 0.08 s): CPU that the workers need on a busy machine.
SELECT id, status::text AS status, 1::bigint AS n, queue, attempts, max_attempts,
       before_owner AS lease_owner, before_lease_until AS lease_until,
       before_heartbeat_at AS heartbeat_at
FROM moved
WHERE %(detail)s
UNION ALL
SELECT NULL, status::text, count(*), NULL, NULL, NULL, NULL, NULL, NULL
FROM moved
WHERE NOT %(detail)s
GROUP BY status
ORDER BY lease_until, id;

-- name: jobs_expired_list
-- What a watcher pass would move, without locking or changing anything (`--dry-run`).
SELECT id, queue, status::text AS status, attempts, max_attempts, lease_owner, lease_until,
       heartbeat_at
FROM {schema}.jobs
WHERE status = 'Processing' AND lease_until < now()
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY lease_until, id
LIMIT %(limit)s;
