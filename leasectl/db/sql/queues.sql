-- Paused queues (migration 7, 007_paused_queues.sql): pause and resume are functions that run
-- with the schema owner's rights and write their queue_events row; every caller goes through
-- them.

-- name: queue_pause
-- Pause a queue (audited, announced on the enqueue channel); its row, or none if already paused.
SELECT queue, paused_at, paused_by, reason
FROM {schema}.queue_pause(%(queue)s::text, %(actor)s::text, %(reason)s::text, %(channel)s::text);

-- name: queue_resume
-- Resume a paused queue (audited, announced); the pause it ended, or none if it was not paused.
SELECT queue, paused_at, paused_by, reason
FROM {schema}.queue_resume(%(queue)s::text, %(actor)s::text, %(reason)s::text, %(channel)s::text);

-- name: status_paused
-- The paused queues for `status` (all, or the one named `queue`), by name: at most %(limit)s, each row with how many there are in all.
SELECT queue, paused_at, paused_by, reason, count(*) OVER () AS total
FROM {schema}.queue_state
WHERE %(queue)s::text IS NULL OR queue = %(queue)s::text
ORDER BY queue
LIMIT %(limit)s;

-- name: queues_paused
-- The paused queues (all, or those named in `queues`), by name.
SELECT queue, paused_at, paused_by, reason
FROM {schema}.queue_state
WHERE %(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])
ORDER BY queue;
