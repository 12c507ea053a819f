-- Schedules (migration 19, 019_schedules.sql): adding, changing, removing, pausing, resuming and
-- running one are functions that run with the schema owner's rights and write their
-- schedule_events row; the watcher's step (schedule_enqueue) enqueues each slot once. Each
-- returns the schedule as ScheduleRow reads it (schedules_list's columns).

-- name: schedule_put
-- Add a schedule or change it to these settings (audited; nothing when they are its own, or it exists and `replace` is false): the schedule and 'add', 'update', 'same' or 'exists'.
SELECT (p.schedule).*, p.action, NULL::text AS last_status, now() AS db_now
FROM {schema}.schedule_put(%(name)s::text, %(cron)s::text, %(timezone)s::text, %(queue)s::text,
                           %(payload)s::jsonb, %(priority)s::integer, %(max_attempts)s::integer,
                           %(catch_up)s::text, %(catch_up_limit)s::integer,
                           %(first_slot)s::timestamptz, %(replace)s::boolean, %(actor)s::text,
                           %(reason)s::text) AS p;

-- name: schedule_remove
-- Remove a schedule (audited): the schedule removed, or nothing when there was none.
SELECT s.*, NULL::text AS last_status, now() AS db_now
FROM {schema}.schedule_remove(%(name)s::text, %(actor)s::text, %(reason)s::text) AS s;

-- name: schedule_pause
-- Pause a schedule (audited): the schedule and whether this call paused it; nothing when there is none.
SELECT (p.schedule).*, p.changed, NULL::text AS last_status, now() AS db_now
FROM {schema}.schedule_pause(%(name)s::text, %(actor)s::text, %(reason)s::text) AS p;

-- name: schedule_resume
-- Resume a schedule from its first slot after now (audited): the schedule and whether this call resumed it; nothing when there is none.
SELECT (p.schedule).*, p.changed, NULL::text AS last_status, now() AS db_now
FROM {schema}.schedule_resume(%(name)s::text, %(first_slot)s::timestamptz, %(actor)s::text,
                              %(reason)s::text) AS p;

-- name: schedule_run
-- Enqueue a schedule's job now, outside its slots (audited): its job id, NULL when there is no such schedule.
SELECT {schema}.schedule_run(%(name)s::text, %(actor)s::text, %(reason)s::text,
                             %(channel)s::text) AS job_id;

-- name: schedule_enqueue
-- The watcher's step for one due schedule: enqueue its slots once each (schedule_slots' key) and move its next slot on: the slots enqueued and their jobs.
SELECT e.slot, e.job_id
FROM {schema}.schedule_enqueue(%(name)s::text, %(version)s::timestamptz,
                               %(slots)s::timestamptz[], %(new_next)s::timestamptz,
                               %(passed_over)s::integer, %(channel)s::text) AS e
ORDER BY e.slot;

-- name: schedules_due
-- The watcher's pass: at most `limit` schedules not paused whose next slot has come (schedules_due_idx), earliest first, with the database's now.
SELECT s.name, s.cron, s.timezone, s.catch_up, s.catch_up_limit, s.next_slot, s.updated_at,
       now() AS db_now
FROM {schema}.schedules AS s
WHERE s.paused_at IS NULL AND s.next_slot <= now()
ORDER BY s.next_slot
LIMIT %(limit)s;

-- name: schedules_list
-- The schedules, by name (at most `limit`), with their last job's status (NULL: none yet, or pruned) at {now}.
SELECT s.*, j.status::text AS last_status, {now} AS db_now
FROM {schema}.schedules AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.last_job_id
ORDER BY s.name
LIMIT %(limit)s;

-- name: schedule_get
-- One schedule by name (its primary key), with its last job's status at {now}.
SELECT s.*, j.status::text AS last_status, {now} AS db_now
FROM {schema}.schedules AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.last_job_id
WHERE s.name = %(name)s;

-- name: schedules_late
-- The schedules not paused whose next slot is more than `grace` before {now} (schedules_due_idx): late, the watcher has not enqueued it; at most `limit`, latest first.
SELECT s.*, j.status::text AS last_status, {now} AS db_now
FROM {schema}.schedules AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.last_job_id
WHERE s.paused_at IS NULL AND s.next_slot < {now} - %(grace)s::interval
ORDER BY s.next_slot
LIMIT %(limit)s;

-- name: schedule_clock
-- The database's clock: the moment a new or resumed schedule's first slot comes after.
SELECT now() AS db_now;

-- name: schedule_slots_prune
-- Delete up to %(batch)s slot rows behind their schedule's next_slot and older than %(keep)s (schedule_slots_prune, migration 25).
SELECT {schema}.schedule_slots_prune(%(keep)s::interval, %(batch)s) AS deleted;
