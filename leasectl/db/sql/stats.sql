-- The per-minute history (migration 20) as `leasectl stats` reads it: queue_history's rows plus
-- the deltas not folded yet (as the exporter reads the counters), for the minutes from
-- date_trunc('minute', now() - %(since)s, 'UTC') on, of one queue (%(queue)s) or of all (NULL),
-- in one read-only REPEATABLE READ transaction (stats_settings first): one snapshot, one now().
-- A queue's minutes are read through queue_history's primary key (queue, minute), every
-- queue's through queue_history_minute_idx; the deltas heap is read whole (it holds what the
-- last fold left: a second's worth while an exporter or `watch` runs).

-- name: stats_settings
-- A custom plan per execution (the queue's NULL folds away), the caller's statement_timeout and lock_timeout; the read clock.
SELECT set_config('plan_cache_mode', 'force_custom_plan', true) AS plan_cache_mode,
       set_config('statement_timeout', %(timeout_ms)s::text, true) AS statement_timeout,
       set_config('lock_timeout', %(timeout_ms)s::text, true) AS lock_timeout,
       set_config('jit', 'off', true) AS jit,
       now() AS db_now;

-- name: stats_counts
-- Per minute: the counts, summed over the queue(s).
SELECT c.minute, sum(c.enqueued)::bigint AS enqueued, sum(c.started)::bigint AS started,
       sum(c.completed)::bigint AS completed, sum(c.failed)::bigint AS failed,
       sum(c.retried)::bigint AS retried
FROM (
    SELECT h.minute, h.enqueued, h.started, h.completed, h.failed, h.retried
    FROM {schema}.queue_history AS h
    WHERE h.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
    UNION ALL
    SELECT d.minute,
           CASE WHEN d.counter = 'enqueued' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'pickup' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'completed' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'failed' THEN d.delta ELSE 0 END,
           CASE WHEN d.counter = 'retried' THEN d.delta ELSE 0 END
    FROM {schema}.queue_history_deltas AS d
    WHERE d.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
      AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
    UNION ALL
    -- The attempts still running, counted when they end (migration 31).
    SELECT r.minute, 0, 1, 0, 0, 0
    FROM {schema}.history_running_pickups(
        date_trunc('minute', now() - %(since)s::interval, 'UTC'), %(queue)s::text) AS r
) AS c
GROUP BY c.minute
ORDER BY c.minute;

-- name: stats_pickup
-- Per minute and pickup bucket (0-based): the attempts started, summed over the queue(s).
-- (Those ended are counted in the history, those still running read as they run: migration 31;
-- the same in stats_counts' `started` and in history_pickup_recent.)
SELECT p.minute, p.bucket, sum(p.n)::bigint AS n
FROM (
    SELECT h.minute, (b.i - 1)::integer AS bucket, b.n
    FROM {schema}.queue_history AS h
    CROSS JOIN LATERAL unnest(h.pickup) WITH ORDINALITY AS b(n, i)
    WHERE h.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
      AND (%(queue)s::text IS NULL OR h.queue = %(queue)s::text)
    UNION ALL
    SELECT d.minute, d.bucket::integer, d.delta
    FROM {schema}.queue_history_deltas AS d
    WHERE d.counter = 'pickup'
      AND d.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
      AND (%(queue)s::text IS NULL OR d.queue = %(queue)s::text)
    UNION ALL
    SELECT r.minute, r.bucket::integer, 1
    FROM {schema}.history_running_pickups(
        date_trunc('minute', now() - %(since)s::interval, 'UTC'), %(queue)s::text) AS r
) AS p
WHERE p.n > 0
GROUP BY p.minute, p.bucket
ORDER BY p.minute, p.bucket;

-- name: stats_backlog
-- Per minute sampled: the due Pending jobs of the queue(s) (capped: some count stopped at its cap; estimated: some count is the planner's estimate past its cap, migration 30).
SELECT b.minute, sum(b.pending)::bigint AS pending, bool_or(b.capped) AS capped,
       bool_or(b.estimated) AS estimated
FROM {schema}.queue_backlog AS b
WHERE b.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
  AND (%(queue)s::text IS NULL OR b.queue = %(queue)s::text)
GROUP BY b.minute
ORDER BY b.minute;

-- name: stats_sampled
-- The minutes whose backlog a fold sampled (a queue without a row in one of them had none due).
SELECT m.minute
FROM {schema}.queue_backlog_minutes AS m
WHERE m.minute >= date_trunc('minute', now() - %(since)s::interval, 'UTC')
ORDER BY m.minute;

-- name: history_pickup_recent
-- Per queue and pickup bucket: the attempts started in the current and the previous UTC minute
-- (the exporter's scrape and `status`): queue_history_minute_idx, at most two minutes of rows
-- per queue, plus the unfolded deltas; at most %(row_limit)s rows (queue, bucket).
SELECT p.queue, p.bucket, sum(p.n)::bigint AS n
FROM (
    SELECT h.queue, (b.i - 1)::integer AS bucket, b.n
    FROM {schema}.queue_history AS h
    CROSS JOIN LATERAL unnest(h.pickup) WITH ORDINALITY AS b(n, i)
    WHERE h.minute >= date_trunc('minute', now(), 'UTC') - interval '1 minute'
    UNION ALL
    SELECT d.queue, d.bucket::integer, d.delta
    FROM {schema}.queue_history_deltas AS d
    WHERE d.counter = 'pickup'
      AND d.minute >= date_trunc('minute', now(), 'UTC') - interval '1 minute'
    UNION ALL
    SELECT r.queue, r.bucket::integer, 1
    FROM {schema}.history_running_pickups(
        date_trunc('minute', now(), 'UTC') - interval '1 minute', NULL) AS r
) AS p
WHERE p.n > 0
GROUP BY p.queue, p.bucket
ORDER BY p.queue, p.bucket
LIMIT %(row_limit)s;

-- name: history_fold
-- Fold up to %(fold_limit)s history deltas into queue_history (history_fold, migration 20: it
-- skips what another transaction holds) and, once a minute, sample each queue's due Pending jobs
-- (at most %(queue_limit)s queues, %(budget)s index entries shared, %(floor)s each at least).
-- Run with metrics_counters_fold, in its transaction.
SELECT {schema}.history_fold(%(fold_limit)s, %(queue_limit)s, %(budget)s, %(floor)s) AS folded;

-- name: history_prune
-- Delete up to %(batch)s rows of each history table older than %(keep)s (history_prune).
SELECT {schema}.history_prune(%(keep)s::interval, %(batch)s) AS deleted;
