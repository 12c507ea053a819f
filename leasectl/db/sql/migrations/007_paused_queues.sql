-- Paused queues: no worker claims a job of a paused queue; jobs in flight finish, enqueue goes
-- on. {schema} is the quoted schema name.
--
-- A queue is paused while it has a queue_state row; resume deletes the row. (One predicate in
-- the claim statements, `NOT EXISTS (... WHERE queue = the queue)`, a probe of this table's
-- primary key; a row kept with a NULL paused_at would be a second predicate to get right in
-- every claim, and the history lives in queue_events anyway.)
--
-- Pause and resume are audited in queue_events, not job_events: a job_events row belongs to
-- one job (its job_id is the key `inspect`, prune and the console read it by), and a pause
-- belongs to a queue, with no job, possibly before its first job exists.
--
-- Bounded like migration 5's jobs: a queue name of 1 to 200 characters (the jobs' bound: a
-- longer one names no job), an actor and a reason of at most 1000 characters (the reason is
-- required to pause: a paused queue should say why to whoever finds it so).
CREATE TABLE {schema}.queue_state (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text NOT NULL,
    reason    text NOT NULL,
    CONSTRAINT queue_state_bounded_values CHECK (
        char_length(queue) BETWEEN 1 AND 200
        AND char_length(paused_by) <= 1000
        AND char_length(reason) BETWEEN 1 AND 1000
    )
);

CREATE TABLE {schema}.queue_events (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue   text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL,
    db_role text NOT NULL DEFAULT session_user,  -- as job_events.db_role (migration 6)
    action  text NOT NULL,
    reason  text,
    before  jsonb,
    after   jsonb,
    CONSTRAINT queue_events_action CHECK (action IN ('pause', 'resume')),
    CONSTRAINT queue_events_bounded_values CHECK (
        char_length(queue) <= 200 AND char_length(actor) <= 1000
        AND char_length(reason) <= 1000
    )
);
CREATE INDEX queue_events_queue_idx ON {schema}.queue_events (queue, id);

-- Pause a queue: its row, its audit row and a NOTIFY on the enqueue channel (`channel`, with
-- the queue's name as an enqueue sends it) in one transaction; the workers of the queue hear
-- it when the pause commits. Returns the new row; nothing when the queue was paused already
-- (that pause, its time, actor and reason, stands).
--
-- As migration 6's functions: the owner's rights, EXECUTE revoked from PUBLIC, a search_path
-- of pg_catalog, the schema, pg_temp, and no schema named inside the quoted bodies.
CREATE FUNCTION {schema}.queue_pause(
    queue_name text, actor_name text, audit_reason text, channel text
) RETURNS TABLE (queue text, paused_at timestamptz, paused_by text, reason text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
#variable_conflict use_column
DECLARE
    paused queue_state;
BEGIN
    INSERT INTO queue_state (queue, paused_by, reason)
    VALUES (queue_name, actor_name, audit_reason)
    ON CONFLICT (queue) DO NOTHING
    RETURNING * INTO paused;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'pause', audit_reason, NULL,
            jsonb_build_object('paused_at', paused.paused_at, 'paused_by', paused.paused_by,
                               'reason', paused.reason));
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN QUERY SELECT paused.queue, paused.paused_at, paused.paused_by, paused.reason;
END
$$;

-- Resume a paused queue: its row goes, its audit row (with the pause it ends) and a NOTIFY
-- as for a pause, so idle workers of the queue claim at once. Returns the pause it ended;
-- nothing when the queue was not paused.
CREATE FUNCTION {schema}.queue_resume(
    queue_name text, actor_name text, audit_reason text, channel text
) RETURNS TABLE (queue text, paused_at timestamptz, paused_by text, reason text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
#variable_conflict use_column
DECLARE
    ended queue_state;
BEGIN
    DELETE FROM queue_state WHERE queue = queue_name RETURNING * INTO ended;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'resume', audit_reason,
            jsonb_build_object('paused_at', ended.paused_at, 'paused_by', ended.paused_by,
                               'reason', ended.reason), NULL);
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN QUERY SELECT ended.queue, ended.paused_at, ended.paused_by, ended.reason;
END
$$;

REVOKE ALL ON FUNCTION {schema}.queue_pause FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_resume FROM PUBLIC;

-- Roles granted by an older leasectl keep working after this upgrade (a worker's claim now
-- reads queue_state): what `leasectl grant` gives each kind of role on the new objects goes to
-- the roles that hold the matching privilege already. Readers of jobs (viewers, operators,
-- workers) read queue_state; readers of job_events (viewers, operators) read queue_events;
-- whoever may run the operator's requeue may pause and resume. A temporary function, so that
-- the schema is named only in its search_path, never inside a quoted body.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'jobs'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON queue_state TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'job_events'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON queue_events TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'jobs_operator_requeue'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION queue_pause, queue_resume TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
