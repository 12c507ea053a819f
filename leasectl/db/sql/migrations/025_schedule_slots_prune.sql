-- Pruning schedule_slots (migration 19), which otherwise keeps one row per slot ever enqueued
-- (an every-minute schedule: about 525,000 rows a year). {schema} is the quoted schema name.
--
-- Why a pruned slot is never enqueued again: schedule_enqueue refuses every slot before the
-- schedule's next_slot (the fence), and next_slot never moves back behind the database's now
-- (schedule_enqueue and schedule_resume take the greatest; schedule_put sets it to the first
-- slot after now, as its caller computes it from the database's clock, and only when the
-- expression or time zone changed). A row is deleted only when its slot is before its
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
