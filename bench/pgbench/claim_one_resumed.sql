-- claim_one.sql, resumed the way a leasectl worker resumes while a backlog drains: each claim
-- starts its walk of the claim index at the claim key (priority, run_at, id) of the client's
-- previous claim, not at the queue's head over the dead entries of every job claimed since the
-- last vacuum. The key starts at the head (pgbench -D p=... r=... k=..., see bench/limit.py)
-- and goes back to it when a claim finds nothing.
WITH c AS (
    UPDATE leasectl.jobs
    SET status = 'Processing', lease_owner = 'pgbench', lease_until = now() + interval '30 s',
        heartbeat_at = now(), attempts = attempts + 1, updated_at = now()
    WHERE id = (
        SELECT id FROM leasectl.jobs
        WHERE status = 'Pending' AND queue = 'default' AND run_at <= now()
          AND (priority, run_at, id) >= (:p::integer, :r::timestamptz, :k::bigint)
        ORDER BY priority, run_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id, attempts, priority, run_at
)
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempts), 0) AS attempt,
       coalesce(max(priority), -2147483648) AS p, coalesce(max(run_at)::text, '-infinity') AS r,
       coalesce(max(id), -9223372036854775808) AS k
FROM c \gset
UPDATE leasectl.jobs
SET status = 'Completed', finished_at = now(), updated_at = now(), lease_until = NULL
WHERE id = :id AND attempts = :attempt AND lease_owner = 'pgbench' AND status = 'Processing';
