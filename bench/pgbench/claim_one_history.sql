-- claim_one.sql plus the attempt history leasectl keeps: the claim opens a job_attempts row and
-- the completion closes it, each in the same statement as the job change.
WITH c AS (
    UPDATE leasectl.jobs
    SET status = 'Processing', lease_owner = 'pgbench', lease_until = now() + interval '30 s',
        heartbeat_at = now(), attempts = attempts + 1, updated_at = now()
    WHERE id = (
        SELECT id FROM leasectl.jobs
        WHERE status = 'Pending' AND queue = 'default' AND run_at <= now()
        ORDER BY priority, run_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, attempts, lease_owner
), opened AS (
    INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, started_at, heartbeat_at)
    SELECT id, attempts, lease_owner, now(), now() FROM c
)
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempts), 0) AS attempt FROM c \gset
WITH done AS (
    UPDATE leasectl.jobs
    SET status = 'Completed', finished_at = now(), updated_at = now(), lease_until = NULL
    WHERE id = :id AND attempts = :attempt AND lease_owner = 'pgbench' AND status = 'Processing'
    RETURNING id, attempts, heartbeat_at
)
UPDATE leasectl.job_attempts AS a
SET outcome = 'completed', ended_at = now(), heartbeat_at = d.heartbeat_at
FROM done AS d
WHERE a.job_id = d.id AND a.attempt = d.attempts;
