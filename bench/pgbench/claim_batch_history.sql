-- claim_batch.sql plus the attempt history leasectl keeps (open on claim, close on complete).
WITH p AS (
    SELECT id FROM leasectl.jobs
    WHERE status = 'Pending' AND queue = 'default' AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT 50
    FOR UPDATE SKIP LOCKED
), c AS (
    UPDATE leasectl.jobs AS j
    SET status = 'Processing', lease_owner = 'pgbench', lease_until = now() + interval '30 s',
        heartbeat_at = now(), attempts = j.attempts + 1, updated_at = now()
    FROM p
    WHERE j.id = p.id
    RETURNING j.id, j.attempts, j.lease_owner
), opened AS (
    INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at)
    SELECT id, attempts, lease_owner, now(), now() FROM c
)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS attempts
FROM c \gset
WITH done AS (
    UPDATE leasectl.jobs AS j
    SET status = 'Completed', finished_at = now(), updated_at = now(), lease_until = NULL
    FROM unnest(:ids::bigint[], :attempts::integer[]) AS f(id, attempt)
    WHERE j.id = f.id AND j.attempts = f.attempt AND j.lease_owner = 'pgbench'
      AND j.status = 'Processing'
    RETURNING j.id, j.attempts, j.heartbeat_at
)
UPDATE leasectl.job_attempts AS a
SET outcome = 'completed', ended_at = now(), heartbeat_at = d.heartbeat_at
FROM done AS d
WHERE a.job_id = d.id AND a.attempt = d.attempts;
