-- Flow control without serialising the claims: a limited queue's limit is split into shards
-- (rows of queue_limit_shards), and each claim locks one of them, not the queue's one row.
-- {schema} is the quoted schema name; as in migration 6, the bodies name no schema. The
-- reasoning (each race and what closes it) is in docs/design.md, "Flow control".
--
-- Migration 17 locked the queue's queue_limits row FOR UPDATE in every claim, to the claim's
-- commit: the claims of a limited queue took turns, each waiting for the WAL flush of the one
-- before it (a limit too high to bind drained at 41-75% of no limit, with fsync on). Here a
-- queue's limit has `shards` active shards (1 to 8): shard i holds its share of the cap (the
-- cap in force split in whole leases: cap / shards, one more for the first cap % shards) and of
-- the bucket (the burst in force split in whole tokens, the rate in the same proportion). A
-- claim locks a shard FOR UPDATE SKIP LOCKED, counts the live leases claimed under it, spends
-- its tokens; a claim that wants more than its shard gives goes on to the next unlocked one.
-- The shares add up to the limit, and no two claims hold one shard at once: whatever the races,
-- the live leases never pass the cap and the starts never pass the rate plus the burst.

-- The shard a lease was claimed under (claims of a limited queue set it; NULL for a claim of a
-- queue without limits; not cleared when the job leaves Processing: only Processing counts).
-- A live lease is counted by the active shard (its shard, or its id's, NULL: id % 8) mod the
-- queue's shards: every live lease by exactly one shard, when the shards change too.
ALTER TABLE {schema}.jobs ADD COLUMN limit_shard smallint;

-- How many shards are active: min(8, the cap, the burst in whole tokens, the rate / 100): each
-- shard of a rate fills at least 100 tokens a second (a slower rate gains nothing from more
-- rows, and its starts would bunch at each shard's whole tokens). Written by queue_limit_set.
ALTER TABLE {schema}.queue_limits ADD COLUMN shards smallint NOT NULL DEFAULT 1;
ALTER TABLE {schema}.queue_limits ADD CONSTRAINT queue_limits_shards CHECK (shards BETWEEN 1 AND 8);
COMMENT ON COLUMN {schema}.queue_limits.tokens IS
    'unused since migration 24: each shard''s bucket is in queue_limit_shards';
COMMENT ON COLUMN {schema}.queue_limits.throttled IS
    'unused since migration 24: claims cut short are counted per shard in queue_limit_shards';

-- Eight rows per limited queue (shard 0 to 7), whatever its active shards: a limit changed
-- rewrites them, never adds or drops one. tokens/tokens_at: the shard's bucket as the last
-- claim that spent from it left it. throttled: claims a limit cut short, counted on a shard
-- the claim held.
CREATE TABLE {schema}.queue_limit_shards (
    queue     text NOT NULL REFERENCES {schema}.queue_limits (queue) ON DELETE CASCADE,
    shard     smallint NOT NULL,
    tokens    double precision NOT NULL DEFAULT 0,
    tokens_at timestamptz NOT NULL DEFAULT now(),
    throttled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard),
    CONSTRAINT queue_limit_shards_bounded CHECK (
        shard BETWEEN 0 AND 7 AND tokens >= 0 AND tokens <= 1000000
    )
);
REVOKE ALL ON {schema}.queue_limit_shards FROM PUBLIC;

-- The active shards of a limit as configured (see queue_limits.shards).
CREATE FUNCTION {schema}.queue_limit_shard_count(
    concurrency integer, rate double precision, burst integer
) RETURNS smallint
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT least(8, coalesce(concurrency, 8),
             CASE WHEN rate IS NULL THEN 8
                  ELSE greatest(1, least(floor(coalesce(burst, greatest(1.0, rate))),
                                         floor(rate / 100))) END)::smallint
$$;

-- A shard's share of the bucket in force, whose burst is `burst` tokens (ramped: maybe not
-- whole): the burst's whole tokens split over the first min(shards, whole) shards, the burst
-- and the rate in that proportion. (0 for a shard past them: no tokens while the ramp is low.)
CREATE FUNCTION {schema}.queue_limit_bucket_share(
    shards integer, shard integer, burst double precision
) RETURNS double precision
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT CASE WHEN shard >= least(shards, w) THEN 0.0::double precision
            ELSE (w / least(shards, w) + CASE WHEN shard < w % least(shards, w) THEN 1 ELSE 0 END)
                 ::double precision / w END
FROM (SELECT greatest(1, floor(burst))::integer AS w) AS b
$$;

-- Lay a queue's buckets out anew over its shards (queue_limit_set, queue_ramp): `total` tokens
-- as of now, shared as the burst in force is; every shard row locked first (held to the commit),
-- so that no claim holds one meanwhile and every later claim reads the new limits.
CREATE FUNCTION {schema}.queue_limit_reshard(queue_name text, total double precision)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    l queue_limits;
    t timestamptz;
    v_burst double precision;
BEGIN
    PERFORM FROM queue_limit_shards AS s WHERE s.queue = queue_name ORDER BY s.shard FOR UPDATE;
    SELECT * INTO l FROM queue_limits AS q WHERE q.queue = queue_name;
    t := clock_timestamp();
    SELECT n.burst INTO v_burst FROM queue_limit_now(l, t) AS n;
    INSERT INTO queue_limit_shards AS s (queue, shard, tokens, tokens_at)
    SELECT queue_name, i, coalesce(total * queue_limit_bucket_share(l.shards, i, v_burst), 0), t
    FROM generate_series(0, 7) AS i
    ON CONFLICT (queue, shard) DO UPDATE SET tokens = excluded.tokens, tokens_at = excluded.tokens_at;
END
$$;

-- The limits as set/clear/ramp return them: tokens and throttled summed over the shards (as
-- stored: the queries refill them to now), tokens_at the clock.
CREATE FUNCTION {schema}.queue_limit_summed(l {schema}.queue_limits)
RETURNS {schema}.queue_limits
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
BEGIN
    SELECT coalesce(sum(s.tokens), 0), coalesce(sum(s.throttled), 0)
    INTO l.tokens, l.throttled
    FROM queue_limit_shards AS s WHERE s.queue = l.queue;
    l.tokens_at := clock_timestamp();
    RETURN l;
END
$$;

DROP FUNCTION {schema}.claim_settle(text, integer, integer, integer);
DROP FUNCTION {schema}.claim_budget(text, integer, bigint[], text);


-- How many of `wanted` jobs a claim of `queue` may take now (the claim walk's LIMIT) and under
-- which shards: `shards` has one entry per job of the budget (the claim's k-th job is claimed
-- under shards[k]). `settle`: the queue is limited (claim_settle settles what was taken);
-- `held`: a shard this claim holds (its throttled count), `wait`: when the limits cut the
-- budget short, the seconds to the next token (0: the cap, no time known). No queue_limits
-- row: all of `wanted`. `shard_count`: the queue's shards as the claim statement read them
-- (where to start; NULL: read here); the limits themselves are read once a shard is locked.
--
-- The shards are tried from one the owner's name picks, each FOR UPDATE SKIP LOCKED, until the
-- budget is whole or every active shard was tried. Each statement below takes a fresh snapshot
-- (a volatile function in READ COMMITTED): a shard's live leases, counted once it is locked,
-- include every claim under it its previous holder committed; the limits read after the first
-- lock are the latest (a change locks every shard: queue_limit_reshard). `done_ids`: the leases
-- this statement completes (owner `owner_name`), counted as free.
--
-- Only when every shard is held by other claims does a claim wait, for one, holding none (no
-- two claims wait on each other), at most 1 s (lock_timeout, for that wait only): a role that
-- holds every shard (in transactions it leaves open) makes the others take nothing after it.
-- (The limits in force are queue_limit_now's and the bucket's shares queue_limit_bucket_share's,
-- written out here: a claim calls no other function.)
CREATE FUNCTION {schema}.claim_budget(
    queue_name text, wanted integer, done_ids bigint[], owner_name text,
    shard_count integer DEFAULT NULL,
    OUT budget integer, OUT settle boolean, OUT shards smallint[], OUT held smallint,
    OUT wait double precision
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
AS $$
DECLARE
    l queue_limits;
    s queue_limit_shards;
    want integer := greatest(coalesce(wanted, 0), 0);
    n integer := shard_count;
    start integer;
    i integer;
    t timestamptz;
    f double precision;
    v_cap integer;
    v_rate double precision;
    v_burst double precision;
    v_whole integer;
    v_active integer;
    v_share integer;
    v_live integer;
    v_part double precision;
    v_tokens double precision;
    got integer;
    v_read boolean := false;
    cap_cut boolean := false;
    next_token double precision;
    old_timeout text;
BEGIN
    budget := want;
    settle := false;
    IF want = 0 THEN
        RETURN;
    END IF;
    IF n IS NULL THEN
        SELECT q.shards INTO n FROM queue_limits AS q WHERE q.queue = queue_name;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    -- A pause wins over any limit: the claim takes nothing, spends no token, counts no throttle.
    IF EXISTS (SELECT FROM queue_state AS p WHERE p.queue = queue_name) THEN
        budget := 0;
        RETURN;
    END IF;
    budget := 0;
    shards := '{}';
    n := least(greatest(n, 1), 8);
    start := ((hashtext(owner_name) % n) + n) % n;
    FOR k IN 0..n LOOP
        EXIT WHEN budget >= want;
        IF k < n THEN
            i := (start + k) % n;
            SELECT * INTO s FROM queue_limit_shards AS q
            WHERE q.queue = queue_name AND q.shard = i FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another claim holds it
        ELSE
            EXIT WHEN v_read;  -- (this claim held a shard: it waits for none)
            i := start;
            old_timeout := current_setting('lock_timeout');
            PERFORM set_config('lock_timeout', '1s', true);
            BEGIN
                SELECT * INTO s FROM queue_limit_shards AS q
                WHERE q.queue = queue_name AND q.shard = i FOR UPDATE;
            EXCEPTION WHEN lock_not_available THEN
                PERFORM set_config('lock_timeout', old_timeout, true);
                RETURN;  -- held past the lock timeout: nothing this time (the worker polls)
            END;
            PERFORM set_config('lock_timeout', old_timeout, true);
            IF NOT FOUND THEN  -- cleared meanwhile: not limited
                budget := want;
                shards := NULL;
                RETURN;
            END IF;
        END IF;
        IF NOT v_read THEN
            v_read := true;
            SELECT * INTO l FROM queue_limits AS q WHERE q.queue = queue_name;
            settle := true;
            t := clock_timestamp();
            -- In force at t (queue_limit_now): the ramp's fraction f, the cap, the rate, the
            -- bucket; then the bucket's whole tokens and the shards they are shared over.
            f := CASE WHEN l.ramp_until IS NULL OR t >= l.ramp_until THEN 1.0
                      WHEN t <= l.ramp_from THEN 0.0
                      ELSE extract(epoch FROM t - l.ramp_from)::double precision
                           / extract(epoch FROM l.ramp_until - l.ramp_from)::double precision END;
            IF l.concurrency IS NOT NULL THEN
                v_cap := greatest(1, ceil(l.concurrency * f))::integer;
            END IF;
            IF l.rate IS NOT NULL THEN
                v_rate := least(l.rate, 1.0) + (l.rate - least(l.rate, 1.0)) * f;
                v_burst := greatest(1.0, coalesce(l.burst, greatest(1.0, l.rate)) * f);
                v_whole := greatest(1, floor(v_burst))::integer;
                v_active := least(l.shards, v_whole);
            END IF;
        END IF;
        held := i;
        CONTINUE WHEN i >= l.shards;  -- (the limit changed to fewer shards meanwhile)
        got := want - budget;
        IF v_cap IS NOT NULL THEN
            v_share := v_cap / l.shards + CASE WHEN i < v_cap % l.shards THEN 1 ELSE 0 END;
            SELECT count(*) INTO v_live
            FROM jobs AS j
            WHERE j.status = 'Processing' AND j.queue = queue_name AND j.lease_until >= now()
              AND ((coalesce(j.limit_shard::integer, (j.id % 8)::integer) % l.shards)
                   + l.shards) % l.shards = i
              AND NOT (j.id = ANY (coalesce(done_ids, '{}')) AND j.lease_owner = owner_name);
            IF v_share - v_live < got THEN
                got := greatest(v_share - v_live, 0);
                cap_cut := true;
            END IF;
        END IF;
        IF v_rate IS NOT NULL THEN
            IF i >= v_active THEN
                got := 0;  -- (no share of a bucket this low)
            ELSE
                v_part := (v_whole / v_active
                           + CASE WHEN i < v_whole % v_active THEN 1 ELSE 0 END)::double precision
                          / v_whole;
                v_tokens := least(v_burst * v_part, s.tokens + v_rate * v_part * greatest(
                    extract(epoch FROM t - s.tokens_at)::double precision, 0.0));
                IF floor(v_tokens) < got THEN
                    got := floor(v_tokens)::integer;
                    next_token := least(next_token, (1 - (v_tokens - got)) / (v_rate * v_part));
                END IF;
                IF got > 0 THEN  -- spent now; what the claim does not take, claim_settle gives back
                    UPDATE queue_limit_shards AS q SET tokens = v_tokens - got, tokens_at = t
                    WHERE q.queue = queue_name AND q.shard = i;
                END IF;
            END IF;
        END IF;
        IF got > 0 THEN
            shards := shards || array_fill(i::smallint, ARRAY[got]);
            budget := budget + got;
        END IF;
    END LOOP;
    IF budget < want THEN
        wait := CASE WHEN next_token IS NOT NULL AND NOT cap_cut THEN next_token ELSE 0 END;
    END IF;
END
$$;

-- What a claim took of its budget: the tokens of the jobs it did not take go back to their
-- shards, a claim a limit cut short is counted (throttled, on the shard it held), and the
-- worker is told how long to wait before it claims this queue again: NULL when no limit cut
-- the claim short, else claim_budget's `wait`. The claim holds every shard named here.
CREATE FUNCTION {schema}.claim_settle(
    queue_name text, used integer, budget integer, wanted integer, shards smallint[],
    held smallint, wait double precision
) RETURNS double precision
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, {schema}, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    cut boolean := used >= budget AND budget < wanted;
BEGIN
    IF used < budget
       AND (SELECT q.rate FROM queue_limits AS q WHERE q.queue = queue_name) IS NOT NULL THEN
        UPDATE queue_limit_shards AS q SET tokens = q.tokens + r.n
        FROM (SELECT u.shard, count(*) AS n FROM unnest(shards[greatest(used, 0) + 1:budget]) AS u(shard)
              GROUP BY u.shard) AS r
        WHERE q.queue = queue_name AND q.shard = r.shard;
    END IF;
    IF NOT cut THEN
        RETURN NULL;
    END IF;
    UPDATE queue_limit_shards AS q SET throttled = q.throttled + 1
    WHERE q.queue = queue_name AND q.shard = held;
    RETURN wait;
END
$$;

-- Set a queue's limits (audited as 'limit', before and after; the workers are told on the
-- enqueue channel so that a throttled worker claims again at once). Values not given (NULL)
-- are not limited: a limit replaces the one before it whole. A set ends any ramp. The bucket
-- starts full, or keeps what it had when the queue was limited already (at most the new burst),
-- laid out anew over the shards.
CREATE OR REPLACE FUNCTION {schema}.queue_limit_set(
    queue_name text, new_concurrency integer, new_rate double precision, new_burst integer,
    actor_name text, audit_reason text, channel text
) RETURNS SETOF {schema}.queue_limits
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old queue_limits;
    v_new queue_limits;
    full_bucket double precision := CASE WHEN new_rate IS NULL THEN 0
        ELSE coalesce(new_burst, greatest(1.0, new_rate)) END;
    kept double precision;
BEGIN
    SELECT * INTO v_old FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
    IF FOUND THEN
        PERFORM FROM queue_limit_shards AS s WHERE s.queue = queue_name
        ORDER BY s.shard FOR UPDATE;
        v_old := queue_limit_summed(v_old);
        kept := CASE WHEN v_old.rate IS NULL THEN full_bucket
                     ELSE least(v_old.tokens, full_bucket) END;
        UPDATE queue_limits AS q
        SET concurrency = new_concurrency, rate = new_rate, burst = new_burst,
            ramp_from = NULL, ramp_until = NULL,
            shards = queue_limit_shard_count(new_concurrency, new_rate, new_burst),
            set_at = now(), set_by = actor_name, reason = audit_reason
        WHERE q.queue = queue_name
        RETURNING * INTO v_new;
    ELSE
        kept := full_bucket;
        INSERT INTO queue_limits AS q (queue, concurrency, rate, burst, shards, set_by, reason)
        VALUES (queue_name, new_concurrency, new_rate, new_burst,
                queue_limit_shard_count(new_concurrency, new_rate, new_burst), actor_name,
                audit_reason)
        RETURNING * INTO v_new;
    END IF;
    PERFORM queue_limit_reshard(queue_name, kept);
    v_new := queue_limit_summed(v_new);
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'limit', audit_reason,
            CASE WHEN v_old.queue IS NOT NULL THEN queue_limit_json(v_old) END,
            queue_limit_json(v_new));
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN NEXT v_new;
END
$$;

-- Clear a queue's limits (audited as 'unlimit', with the limits it ended; the workers are told).
-- Returns the limits it ended (their shards summed); nothing when the queue had none.
CREATE OR REPLACE FUNCTION {schema}.queue_limit_clear(
    queue_name text, actor_name text, audit_reason text, channel text
) RETURNS SETOF {schema}.queue_limits
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    ended queue_limits;
BEGIN
    SELECT * INTO ended FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM FROM queue_limit_shards AS s WHERE s.queue = queue_name ORDER BY s.shard FOR UPDATE;
    ended := queue_limit_summed(ended);
    DELETE FROM queue_limits AS q WHERE q.queue = queue_name;  -- (its shards with it)
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'unlimit', audit_reason, queue_limit_json(ended), NULL);
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN NEXT ended;
END
$$;

-- Start a ramp on a limited queue and end its pause, if it is paused, in one transaction
-- (`leasectl resume QUEUE --ramp 5m`): the cap and the rate rise from their floor to the
-- configured values over `ramp`; the bucket starts with (at most) one token. Audited as 'limit'
-- (the ramp in `after`), and as 'resume' by queue_resume when there was a pause. Returns the
-- limits with their ramp and whether a pause ended; nothing when the queue has no limits.
CREATE OR REPLACE FUNCTION {schema}.queue_ramp(
    queue_name text, ramp interval, actor_name text, audit_reason text, channel text
) RETURNS TABLE (limits {schema}.queue_limits, resumed boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    v_old queue_limits;
    v_new queue_limits;
    ended boolean;
BEGIN
    SELECT * INTO v_old FROM queue_limits AS q WHERE q.queue = queue_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM FROM queue_limit_shards AS s WHERE s.queue = queue_name ORDER BY s.shard FOR UPDATE;
    v_old := queue_limit_summed(v_old);
    UPDATE queue_limits AS q
    SET ramp_from = clock_timestamp(), ramp_until = clock_timestamp() + ramp
    WHERE q.queue = queue_name
    RETURNING * INTO v_new;
    PERFORM queue_limit_reshard(queue_name, least(v_old.tokens, 1.0));
    v_new := queue_limit_summed(v_new);
    INSERT INTO queue_events (queue, actor, action, reason, before, after)
    VALUES (queue_name, actor_name, 'limit', coalesce(audit_reason, v_old.reason),
            queue_limit_json(v_old), queue_limit_json(v_new));
    ended := EXISTS (SELECT FROM queue_resume(queue_name, actor_name, audit_reason, channel));
    PERFORM pg_notify(channel, left(queue_name, 128));
    RETURN QUERY SELECT v_new, ended;
END
$$;

-- The queues limited before this migration: their shards, their bucket kept (laid out anew),
-- their throttled count on shard 0.
UPDATE {schema}.queue_limits
SET shards = {schema}.queue_limit_shard_count(concurrency, rate, burst);
INSERT INTO {schema}.queue_limit_shards (queue, shard, throttled)
SELECT l.queue, i, CASE WHEN i = 0 THEN l.throttled ELSE 0 END
FROM {schema}.queue_limits AS l, generate_series(0, 7) AS i;
SELECT {schema}.queue_limit_reshard(l.queue, l.tokens) FROM {schema}.queue_limits AS l;

REVOKE ALL ON FUNCTION {schema}.queue_limit_shard_count FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_bucket_share FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_reshard FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.queue_limit_summed FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_budget FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_settle FROM PUBLIC;

-- Roles granted by an older leasectl keep working after this upgrade: readers of queue_limits
-- read its shards; workers (who may UPDATE jobs' status) execute the new claim_budget and
-- claim_settle (dropped and made again above) and write the shard of the leases they claim.
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'queue_limits'::regclass AND a.privilege_type = 'SELECT'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT SELECT ON queue_limit_shards TO %s', role_name);
    END LOOP;
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_attribute t, aclexplode(t.attacl) a
        WHERE t.attrelid = 'jobs'::regclass AND t.attname = 'status'
          AND a.privilege_type = 'UPDATE'
        UNION
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'jobs'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee NOT IN (0, c.relowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION claim_budget, claim_settle TO %s', role_name);
        EXECUTE format('GRANT UPDATE (limit_shard) ON jobs TO %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
