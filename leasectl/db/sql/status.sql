-- name: status_live_counts
-- Exact counts of the live states per queue, each read from its own partial index.
SELECT queue, 'Pending' AS status, count(*) AS jobs,
       count(*) FILTER (WHERE run_at <= now()) AS due,
       min(run_at) FILTER (WHERE run_at <= now()) AS oldest_due_at,
       0::bigint AS expired
FROM {schema}.jobs WHERE status = 'Pending'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue
UNION ALL
SELECT queue, 'Processing', count(*), 0, NULL, count(*) FILTER (WHERE lease_until < now())
FROM {schema}.jobs WHERE status = 'Processing'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue
UNION ALL
SELECT queue, 'Stuck', count(*), 0, NULL, 0
FROM {schema}.jobs WHERE status = 'Stuck'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue;

-- name: status_finished_recent
-- Exact Completed/Failed/Cancelled counts per queue over a recent window, from the finished_at index.
SELECT queue, status::text AS status, count(*) AS jobs
FROM {schema}.jobs
WHERE status IN ('Completed', 'Failed', 'Cancelled') AND finished_at >= now() - %(window)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY queue, status;

-- name: status_finished_estimate
-- Estimated all-time Completed/Failed/Cancelled totals from planner statistics (exact would scan history).
SELECT v.status, round(c.reltuples * v.freq)::bigint AS jobs
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_stats AS s
  ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = 'status'
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs)
     AS v(status, freq)
WHERE n.nspname = %(schema)s AND c.relname = 'jobs' AND c.reltuples > 0
  AND v.status IN ('Completed', 'Failed', 'Cancelled');

-- name: status_owners
-- One row per lease owner or recently seen worker: leases held, freshness inputs, nearest expiry.
-- An owner that holds leases but fell out of the recent window still gets its declared intervals.
WITH held AS (
    SELECT lease_owner, count(*) AS held,
           count(*) FILTER (WHERE lease_until < now()) AS expired,
           max(heartbeat_at) AS last_job_heartbeat_at, min(lease_until) AS next_expiry_at
    FROM {schema}.jobs
    WHERE status = 'Processing'
    GROUP BY lease_owner
), seen AS (
    SELECT * FROM {schema}.workers
    WHERE last_seen_at > now() - %(window)s::interval
)
SELECT coalesce(w.worker_id, h.lease_owner) AS owner,
       coalesce(w.hostname, o.hostname) AS hostname, coalesce(w.pid, o.pid) AS pid,
       coalesce(w.queues, o.queues) AS queues, coalesce(w.lease_ttl, o.lease_ttl) AS lease_ttl,
       coalesce(w.heartbeat_every, o.heartbeat_every) AS heartbeat_every,
       coalesce(w.started_at, o.started_at) AS started_at,
       coalesce(w.last_seen_at, o.last_seen_at) AS last_seen_at,
       coalesce(w.stopped_at, o.stopped_at) AS stopped_at,
       coalesce(h.held, 0) AS held, coalesce(h.expired, 0) AS expired,
       h.last_job_heartbeat_at, h.next_expiry_at
FROM seen AS w
FULL JOIN held AS h ON h.lease_owner = w.worker_id
LEFT JOIN {schema}.workers AS o ON w.worker_id IS NULL AND o.worker_id = h.lease_owner
ORDER BY coalesce(h.expired, 0) DESC, h.next_expiry_at NULLS LAST, owner
LIMIT %(limit)s;
