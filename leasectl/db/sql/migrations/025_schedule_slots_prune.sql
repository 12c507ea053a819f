-- Pruning schedule_slots (migration 19), which otherwise keeps one row per slot ever enqueued
-- (an every-minute schedule: about 525,000 rows a year). {schema} is the quoted schema name.
--
-- Why a pruned slot is never enqueued again: schedule_enqueue refuses every slot before the
-- schedule's next_slot (the fence), and next_slot never moves back behind the database's now
-- (schedule_enqueue and schedule_resume take the greatest; schedule_put sets it to the first
-- slot after now, as its caller computes it from the database's clock, only when the expression
-- or time zone changed, and refuses one more than a day old: below). A row is deleted only when its slot is before its
-- schedule's next_slot AND older than `keep` (a day at least): such a slot is behind the
-- fence, so the key on (schedule, slot) is no longer what refuses it. A row at or after
-- next_slot (next_slot moved back by hand, a restored backup) is kept, whatever its age: there
-- the key is the only guard left.

-- The prune's walk: the oldest slots first, whatever their schedule.
CREATE INDEX schedule_slots_slot_idx ON {schema}.schedule_slots (slot);

-- Delete up to max_rows slot rows behind their schedule's fence and older than `keep`; returns
-- how many. Rows another session holds are skipped (their turn comes next time); the lock
-- timeout bounds the wait for anything else.
CREATE FUNCTION {schema}.schedule_slots_prune(keep interval, max_rows integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '100ms'
AS $$
DECLARE
    cutoff timestamptz := statement_timestamp() - keep;
    n bigint;
BEGIN
    IF keep IS NULL OR keep < interval '1 day' THEN
        RAISE EXCEPTION 'schedule slots are kept for at least a day, not %', keep
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_rows IS NULL OR max_rows < 1 OR max_rows > 100000 THEN
        RAISE EXCEPTION 'a prune batch is 1 to 100000 rows, not %', max_rows
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM schedule_slots WHERE ctid = ANY (ARRAY(
        SELECT t.ctid
        FROM schedule_slots AS t
        JOIN schedules AS s ON s.name = t.schedule
        WHERE t.slot < cutoff AND t.slot < s.next_slot
        ORDER BY t.slot
        LIMIT max_rows
        FOR UPDATE OF t SKIP LOCKED));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

REVOKE ALL ON FUNCTION {schema}.schedule_slots_prune FROM PUBLIC;

-- Migration 19's schedule_put, with one guard more: a first slot (the next_slot of a new
-- schedule, or of one whose expression or time zone changed) more than a day before now is
-- refused. The CLI computes it as the first slot after the database's now; a hand-written call
-- with an older one would move the fence back over slots pruned above (kept a day at least),
-- which could then be enqueued again. (CREATE OR REPLACE: its grants stay.)
CREATE OR REPLACE FUNCTION {schema}.schedule_put(
    schedule_name text, new_cron text, new_timezone text, new_queue text, new_payload jsonb,
    new_priority integer, new_max_attempts integer, new_catch_up text, new_catch_up_limit integer,
    first_slot timestamptz, may_replace boolean, actor_name text, audit_reason text
) RETURNS TABLE (schedule {schema}.schedules, action text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old schedules;
    v_new schedules;
BEGIN
    IF first_slot IS NULL OR first_slot < statement_timestamp() - interval '1 day' THEN
        RAISE EXCEPTION 'a schedule''s first slot comes after now, not at %', first_slot
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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

-- Roles granted by an older leasectl: whoever runs the watcher's schedules step (EXECUTE on
-- schedule_enqueue: operators) prunes the slots too, with no second `leasectl grant`.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'schedule_enqueue'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION schedule_slots_prune TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
