-- Schedules: recurring jobs that `leasectl watch` enqueues once per slot, with no leader.
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema.
--
-- A schedule is a cron expression in a time zone; its slots are the moments the expression
-- names. Python computes them (cronsim, core/schedules.py: PostgreSQL has no cron); PostgreSQL
-- decides which of them become jobs, once each:
-- * schedule_slots' PRIMARY KEY (schedule, slot): a slot is enqueued at most once, ever, whatever
--   the watchers racing for it computed (the job and its slot row in one transaction);
-- * next_slot: the first slot not yet decided (enqueued, or skipped by the catch-up policy);
--   schedule_enqueue takes only slots at or after it, under the schedule row's lock, and moves
--   it forward, never back; a slot a pass skipped is never enqueued by a later, slower pass.
-- * updated_at: the version of the schedule a pass computed its slots from; a schedule changed
--   meanwhile (its expression, its time zone) enqueues nothing until the next pass.
-- Nothing here trusts the watcher's clock: the slots it sends are only ever moments its
-- expression names, and the due query compares next_slot with the database's now().
--
-- Bounded like the jobs (migration 5) and the queue limits (migration 17): a name of 1 to 200
-- characters, as a queue's; actor and reason of at most 1000.
CREATE TABLE {schema}.schedules (
    name             text PRIMARY KEY,
    cron             text NOT NULL,
    timezone         text NOT NULL DEFAULT 'UTC',
    queue            text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    priority         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 5,
    catch_up         text NOT NULL DEFAULT 'last',
    catch_up_limit   integer NOT NULL DEFAULT 10,
    next_slot        timestamptz NOT NULL,
    last_slot        timestamptz,
    last_job_id      bigint,
    last_enqueued_at timestamptz,
    skipped          bigint NOT NULL DEFAULT 0,
    paused_at        timestamptz,
    paused_by        text,
    paused_reason    text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    created_by       text NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by       text NOT NULL,
    reason           text,
    CONSTRAINT schedules_bounded_values CHECK (
        char_length(name) BETWEEN 1 AND 200
        AND char_length(cron) BETWEEN 1 AND 200
        AND char_length(timezone) BETWEEN 1 AND 100
        AND char_length(queue) BETWEEN 1 AND 200
        AND max_attempts BETWEEN 1 AND 1000
        AND catch_up_limit BETWEEN 1 AND 1000
        AND char_length(created_by) <= 1000 AND char_length(updated_by) <= 1000
        AND char_length(paused_by) <= 1000 AND char_length(paused_reason) <= 1000
        AND char_length(reason) <= 1000
        AND next_slot BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00'
    ),
    CONSTRAINT schedules_catch_up CHECK (catch_up IN ('none', 'last', 'all')),
    CONSTRAINT schedules_paused CHECK ((paused_at IS NULL) = (paused_by IS NULL))
);
-- The watcher's due query: the schedules not paused whose next slot has come, earliest first.
CREATE INDEX schedules_due_idx ON {schema}.schedules (next_slot) WHERE paused_at IS NULL;

-- One row per slot ever enqueued (its job's id): the key that makes a slot's job unique.
CREATE TABLE {schema}.schedule_slots (
    schedule    text NOT NULL REFERENCES {schema}.schedules (name) ON DELETE CASCADE,
    slot        timestamptz NOT NULL,
    job_id      bigint,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, slot)
);

-- add, update, remove, pause, resume, run: who (actor, db_role), why, before and after.
CREATE TABLE {schema}.schedule_events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now(),
    actor    text NOT NULL,
    db_role  text NOT NULL DEFAULT session_user,
    action   text NOT NULL,
    reason   text,
    before   jsonb,
    after    jsonb,
    CONSTRAINT schedule_events_action
        CHECK (action IN ('add', 'update', 'remove', 'pause', 'resume', 'run')),
    CONSTRAINT schedule_events_bounded_values CHECK (
        char_length(schedule) <= 200 AND char_length(actor) <= 1000
        AND char_length(reason) <= 1000
    )
);
CREATE INDEX schedule_events_schedule_idx ON {schema}.schedule_events (schedule, id);

-- A schedule's settings as its audit rows keep them.
CREATE FUNCTION {schema}.schedule_json(s {schema}.schedules) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT jsonb_build_object('cron', s.cron, 'timezone', s.timezone, 'queue', s.queue,
                          'payload', s.payload, 'priority', s.priority,
                          'max_attempts', s.max_attempts, 'catch_up', s.catch_up,
                          'catch_up_limit', s.catch_up_limit, 'next_slot', s.next_slot,
                          'paused_at', s.paused_at, 'paused_by', s.paused_by,
                          'paused_reason', s.paused_reason)
$$;

-- Add a schedule, or change one to these settings (`schedule add`, `schedule sync`). Nothing
-- changes, and nothing is audited, when the settings are the ones it has (sync is idempotent).
-- `first_slot` is the first slot of the expression after now, which the caller computed; it
-- becomes next_slot for a new schedule and for one whose expression or time zone changed (a
-- changed schedule catches up nothing of its old expression). Returns the schedule and what
-- happened: 'add', 'update' or 'same'; or 'exists' (nothing changed) for a schedule of that name
-- with other settings when `may_replace` is false (`schedule add`).
CREATE FUNCTION {schema}.schedule_put(
    schedule_name text, new_cron text, new_timezone text, new_queue text, new_payload jsonb,
    new_priority integer, new_max_attempts integer, new_catch_up text, new_catch_up_limit integer,
    first_slot timestamptz, may_replace boolean, actor_name text, audit_reason text
) RETURNS TABLE (schedule {schema}.schedules, action text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old schedules;
    v_new schedules;
BEGIN
    SELECT * INTO v_old FROM schedules AS s WHERE s.name = schedule_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO schedules AS s (name, cron, timezone, queue, payload, priority, max_attempts,
                                    catch_up, catch_up_limit, next_slot, created_by, updated_by,
                                    reason)
        VALUES (schedule_name, new_cron, new_timezone, new_queue, new_payload, new_priority,
                new_max_attempts, new_catch_up, new_catch_up_limit, first_slot, actor_name,
                actor_name, audit_reason)
        ON CONFLICT (name) DO NOTHING
        RETURNING * INTO v_new;
        IF NOT FOUND THEN  -- added meanwhile by another session: that one stands
            SELECT * INTO v_new FROM schedules AS s WHERE s.name = schedule_name;
            RETURN QUERY SELECT v_new, 'same'::text;
            RETURN;
        END IF;
        INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
        VALUES (schedule_name, actor_name, 'add', audit_reason, NULL, schedule_json(v_new));
        RETURN QUERY SELECT v_new, 'add'::text;
        RETURN;
    END IF;
    IF (v_old.cron, v_old.timezone, v_old.queue, v_old.payload, v_old.priority,
        v_old.max_attempts, v_old.catch_up, v_old.catch_up_limit)
       IS NOT DISTINCT FROM (new_cron, new_timezone, new_queue, new_payload, new_priority,
                             new_max_attempts, new_catch_up, new_catch_up_limit) THEN
        RETURN QUERY SELECT v_old, 'same'::text;
        RETURN;
    END IF;
    IF NOT may_replace THEN
        RETURN QUERY SELECT v_old, 'exists'::text;
        RETURN;
    END IF;
    UPDATE schedules AS s
    SET cron = new_cron, timezone = new_timezone, queue = new_queue, payload = new_payload,
        priority = new_priority, max_attempts = new_max_attempts, catch_up = new_catch_up,
        catch_up_limit = new_catch_up_limit,
        next_slot = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (new_cron, new_timezone)
                         THEN first_slot ELSE s.next_slot END,
        updated_at = clock_timestamp(), updated_by = actor_name, reason = audit_reason
    WHERE s.name = schedule_name
    RETURNING * INTO v_new;
    INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
    VALUES (schedule_name, actor_name, 'update', audit_reason, schedule_json(v_old),
            schedule_json(v_new));
    RETURN QUERY SELECT v_new, 'update'::text;
END
$$;

-- Remove a schedule (its slots' rows go with it; the jobs it enqueued stay). Returns it;
-- nothing when there was none.
CREATE FUNCTION {schema}.schedule_remove(
    schedule_name text, actor_name text, audit_reason text
) RETURNS SETOF {schema}.schedules
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    ended schedules;
BEGIN
    DELETE FROM schedules AS s WHERE s.name = schedule_name RETURNING * INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
    VALUES (schedule_name, actor_name, 'remove', audit_reason, schedule_json(ended), NULL);
    RETURN NEXT ended;
END
$$;

-- Pause a schedule: no slot of it is enqueued until it is resumed. Returns it paused (the
-- pause that stands when it was paused already: nothing changed, `changed` false).
CREATE FUNCTION {schema}.schedule_pause(
    schedule_name text, actor_name text, audit_reason text
) RETURNS TABLE (schedule {schema}.schedules, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old schedules;
    v_new schedules;
BEGIN
    SELECT * INTO v_old FROM schedules AS s WHERE s.name = schedule_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_old.paused_at IS NOT NULL THEN
        RETURN QUERY SELECT v_old, false;
        RETURN;
    END IF;
    UPDATE schedules AS s
    SET paused_at = now(), paused_by = actor_name, paused_reason = audit_reason
    WHERE s.name = schedule_name
    RETURNING * INTO v_new;
    INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
    VALUES (schedule_name, actor_name, 'pause', audit_reason, schedule_json(v_old),
            schedule_json(v_new));
    RETURN QUERY SELECT v_new, true;
END
$$;

-- Resume a paused schedule from `first_slot` (the first slot after now, computed by the
-- caller): the slots that fell while it was paused are skipped, not caught up. Returns it
-- (`changed` false when it was not paused: nothing changed).
CREATE FUNCTION {schema}.schedule_resume(
    schedule_name text, first_slot timestamptz, actor_name text, audit_reason text
) RETURNS TABLE (schedule {schema}.schedules, changed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old schedules;
    v_new schedules;
BEGIN
    SELECT * INTO v_old FROM schedules AS s WHERE s.name = schedule_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_old.paused_at IS NULL THEN
        RETURN QUERY SELECT v_old, false;
        RETURN;
    END IF;
    UPDATE schedules AS s
    SET paused_at = NULL, paused_by = NULL, paused_reason = NULL,
        next_slot = greatest(s.next_slot, first_slot)
    WHERE s.name = schedule_name
    RETURNING * INTO v_new;
    INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
    VALUES (schedule_name, actor_name, 'resume', audit_reason, schedule_json(v_old),
            schedule_json(v_new));
    RETURN QUERY SELECT v_new, true;
END
$$;

-- One job of a schedule now, outside its slots (`schedule run`): audited as 'run' with its job;
-- the schedule's next slot is unchanged. Returns the job's id; nothing when there is no such
-- schedule. (A paused schedule runs too: run is a person's deliberate act.)
CREATE FUNCTION {schema}.schedule_run(
    schedule_name text, actor_name text, audit_reason text, channel text
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    s schedules;
    v_job bigint;
BEGIN
    SELECT * INTO s FROM schedules AS q WHERE q.name = schedule_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO jobs (queue, payload, priority, max_attempts)
    VALUES (s.queue, s.payload, s.priority, s.max_attempts)
    RETURNING id INTO v_job;
    UPDATE schedules AS q SET last_job_id = v_job, last_enqueued_at = now()
    WHERE q.name = schedule_name;
    INSERT INTO schedule_events (schedule, actor, action, reason, before, after)
    VALUES (schedule_name, actor_name, 'run', audit_reason, NULL,
            jsonb_build_object('job_id', v_job));
    PERFORM pg_notify(channel, left(s.queue, 128));
    RETURN v_job;
END
$$;

-- The watcher's step for one due schedule: enqueue the jobs of `slots` (computed by the caller
-- from the schedule as of `version`, its updated_at) and move next_slot to `new_next` (the
-- first slot after the pass's now; the `passed_over` slots the catch-up policy skipped are
-- counted in `skipped`).
-- Once per slot, whatever races it:
-- * the schedule's row is locked (FOR UPDATE, at most the lock_timeout below: a pass that cannot
--   have it gets an error and tries again the next pass), so that racing watchers take turns,
--   and each reads the next_slot the one before it committed;
-- * a schedule changed (version), paused or removed since the pass read it enqueues nothing;
-- * a slot before next_slot was decided already (enqueued or skipped): not enqueued again;
-- * schedule_slots' primary key: a slot with a row is never enqueued again, whatever next_slot
--   says (a restored backup, a hand edit).
-- Returns the slots enqueued and their jobs.
CREATE FUNCTION {schema}.schedule_enqueue(
    schedule_name text, version timestamptz, slots timestamptz[], new_next timestamptz,
    passed_over integer, channel text
) RETURNS TABLE (slot timestamptz, job_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '2s'
AS $$
#variable_conflict use_column
DECLARE
    s schedules;
    v_slot timestamptz;
    v_job bigint;
    v_done integer := 0;
    v_last timestamptz;
BEGIN
    SELECT * INTO s FROM schedules AS q WHERE q.name = schedule_name FOR UPDATE;
    IF NOT FOUND OR s.paused_at IS NOT NULL OR s.updated_at <> version THEN
        RETURN;
    END IF;
    FOR v_slot IN SELECT DISTINCT u.x FROM unnest(slots) AS u(x) ORDER BY u.x LOOP
        CONTINUE WHEN v_slot < s.next_slot;
        INSERT INTO schedule_slots AS t (schedule, slot)
        VALUES (schedule_name, v_slot)
        ON CONFLICT (schedule, slot) DO NOTHING;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO jobs (queue, payload, priority, max_attempts)
        VALUES (s.queue, s.payload, s.priority, s.max_attempts)
        RETURNING id INTO v_job;
        UPDATE schedule_slots AS t SET job_id = v_job
        WHERE t.schedule = schedule_name AND t.slot = v_slot;
        v_done := v_done + 1;
        v_last := v_slot;
        slot := v_slot;
        job_id := v_job;
        RETURN NEXT;
    END LOOP;
    UPDATE schedules AS q
    SET next_slot = greatest(q.next_slot, new_next),
        last_slot = coalesce(v_last, q.last_slot),
        last_job_id = CASE WHEN v_last IS NOT NULL THEN v_job ELSE q.last_job_id END,
        last_enqueued_at = CASE WHEN v_last IS NOT NULL THEN now() ELSE q.last_enqueued_at END,
        skipped = q.skipped + greatest(passed_over, 0)
    WHERE q.name = schedule_name;
    IF v_done > 0 THEN
        PERFORM pg_notify(channel, left(s.queue, 128));
    END IF;
END
$$;

REVOKE ALL ON FUNCTION {schema}.schedule_json FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_put FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_remove FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_pause FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_resume FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_run FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.schedule_enqueue FROM PUBLIC;

-- Roles granted by an older leasectl: readers of job_events (viewers, operators) read the
-- schedules, their slots and their events; whoever may pause a queue may manage schedules (and
-- `watch`, which enqueues their slots).
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'job_events'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON schedules, schedule_slots, schedule_events TO %s',
                       role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'queue_pause'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION schedule_put, schedule_remove, schedule_pause, '
                       'schedule_resume, schedule_run, schedule_enqueue TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
