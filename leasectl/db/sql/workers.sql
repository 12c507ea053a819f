-- name: worker_register
-- A worker instance announces itself (its id is the lease_owner it writes).
INSERT INTO {schema}.workers
    (worker_id, hostname, pid, queues, lease_ttl, heartbeat_every, started_at, last_seen_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s, %(lease_ttl)s, %(heartbeat_every)s,
        now(), now())
ON CONFLICT (worker_id) DO UPDATE
SET last_seen_at = now(), stopped_at = NULL, queues = excluded.queues,
    lease_ttl = excluded.lease_ttl, heartbeat_every = excluded.heartbeat_every;

-- name: worker_seen
-- Worker-level heartbeat.
UPDATE {schema}.workers SET last_seen_at = now() WHERE worker_id = %(worker_id)s;

-- name: worker_stopped
-- A worker shut down cleanly.
UPDATE {schema}.workers SET stopped_at = now(), last_seen_at = now()
WHERE worker_id = %(worker_id)s;
