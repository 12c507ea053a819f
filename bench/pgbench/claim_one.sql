-- The leased pattern in raw SQL, one job per transaction: claim the next Pending job of a queue
-- (FOR UPDATE SKIP LOCKED, priority order, through the claim index), then complete it, fenced,
-- in a second transaction. An empty queue claims nothing (id 0) and completes nothing.
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
    RETURNING id, attempts
)
SELECT coalesce(max(id), 0) AS id, coalesce(max(attempts), 0) AS attempt FROM c \gset
UPDATE leasectl.jobs
SET status = 'Completed', finished_at = now(), updated_at = now(), lease_until = NULL
WHERE id = :id AND attempts = :attempt AND lease_owner = 'pgbench' AND status = 'Processing';
