-- Flow control (migration 17, 017_queue_limits.sql): setting, clearing and ramping a queue's
-- limits are functions that run with the schema owner's rights and write their queue_events
-- row; the claims enforce the limits (claim_budget, claim_settle in jobs.sql's claims). Each
-- returns the limits as QueueLimit reads them (queue_limits_list's columns).

-- name: queue_limit_set
-- Set a queue's limits (audited, announced): the limits as now stored, in force and in use.
SELECT l.queue, l.concurrency, l.rate, l.burst, l.ramp_from, l.ramp_until, l.set_at, l.set_by,
       l.reason, l.throttled, n.cap AS cap_now, n.rate AS rate_now, n.burst AS burst_now,
       CASE WHEN n.rate IS NOT NULL THEN least(n.burst, l.tokens + n.rate * greatest(
           extract(epoch FROM now() - l.tokens_at)::double precision, 0.0)) END AS tokens,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'Processing' AND j.queue = l.queue
          AND j.lease_until >= now()) AS live,
       now() AS db_now
FROM {schema}.queue_limit_set(%(queue)s::text, %(concurrency)s::integer,
                              %(rate)s::double precision, %(burst)s::integer, %(actor)s::text,
                              %(reason)s::text, %(channel)s::text) AS l
CROSS JOIN LATERAL {schema}.queue_limit_now(l, now()) AS n;

-- name: queue_limit_clear
-- Clear a queue's limits (audited, announced): the limits it ended, or nothing when it had none.
SELECT l.queue, l.concurrency, l.rate, l.burst, l.ramp_from, l.ramp_until, l.set_at, l.set_by,
       l.reason, l.throttled, n.cap AS cap_now, n.rate AS rate_now, n.burst AS burst_now,
       CASE WHEN n.rate IS NOT NULL THEN least(n.burst, l.tokens + n.rate * greatest(
           extract(epoch FROM now() - l.tokens_at)::double precision, 0.0)) END AS tokens,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'Processing' AND j.queue = l.queue
          AND j.lease_until >= now()) AS live,
       now() AS db_now
FROM {schema}.queue_limit_clear(%(queue)s::text, %(actor)s::text, %(reason)s::text,
                                %(channel)s::text) AS l
CROSS JOIN LATERAL {schema}.queue_limit_now(l, now()) AS n;

-- name: queue_ramp
-- Start a ramp on a limited queue and end its pause if any (audited, announced): its limits and whether a pause ended; nothing when it has no limits.
SELECT l.queue, l.concurrency, l.rate, l.burst, l.ramp_from, l.ramp_until, l.set_at, l.set_by,
       l.reason, l.throttled, n.cap AS cap_now, n.rate AS rate_now, n.burst AS burst_now,
       CASE WHEN n.rate IS NOT NULL THEN least(n.burst, l.tokens + n.rate * greatest(
           extract(epoch FROM now() - l.tokens_at)::double precision, 0.0)) END AS tokens,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'Processing' AND j.queue = l.queue
          AND j.lease_until >= now()) AS live,
       now() AS db_now, r.resumed
FROM {schema}.queue_ramp(%(queue)s::text, %(ramp)s::interval, %(actor)s::text,
                         %(reason)s::text, %(channel)s::text) AS r
CROSS JOIN LATERAL (SELECT (r.limits).*) AS l
CROSS JOIN LATERAL {schema}.queue_limit_now(r.limits, now()) AS n;

-- name: queue_limits_list
-- The limited queues (all, or those named in `queues`), by name: their limits as configured, in force at {now} (ramped), and their use (live leases, tokens refilled to {now}, throttled claims).
-- (Live leases through jobs_processing_idx: the Processing set, bounded by the fleet.)
SELECT l.queue, l.concurrency, l.rate, l.burst, l.ramp_from, l.ramp_until, l.set_at, l.set_by,
       l.reason, u.throttled, n.cap AS cap_now, n.rate AS rate_now, n.burst AS burst_now,
       CASE WHEN n.rate IS NOT NULL THEN u.tokens END AS tokens,
       (SELECT count(*) FROM {schema}.jobs AS j
        WHERE j.status = 'Processing' AND j.queue = l.queue
          AND j.lease_until >= {now}) AS live,
       {now} AS db_now
FROM {schema}.queue_limits AS l
CROSS JOIN LATERAL {schema}.queue_limit_now(l, {now}) AS n
CROSS JOIN LATERAL (
    -- Use summed over the shards (migration 24): each active shard's bucket refilled to {now}
    -- by its share of the burst in force (the shares written out as queue_limit_bucket_share).
    SELECT coalesce(sum(s.throttled), 0)::bigint AS throttled,
           sum(least(n.burst * w.part, s.tokens + n.rate * w.part * greatest(
               extract(epoch FROM {now} - s.tokens_at)::double precision, 0.0))) AS tokens
    FROM {schema}.queue_limit_shards AS s
    CROSS JOIN LATERAL (
        SELECT greatest(1, floor(coalesce(n.burst, 1)))::integer AS w,
               least(l.shards, greatest(1, floor(coalesce(n.burst, 1)))::integer) AS m
    ) AS c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN s.shard >= c.m THEN 0.0::double precision
                    ELSE (c.w / c.m + CASE WHEN s.shard < mod(c.w, c.m) THEN 1 ELSE 0 END)
                         ::double precision / c.w END AS part
    ) AS w
    WHERE s.queue = l.queue
) AS u
WHERE %(queues)s::text[] IS NULL OR l.queue = ANY (%(queues)s::text[])
ORDER BY l.queue;
