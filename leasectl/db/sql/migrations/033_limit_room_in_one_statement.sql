-- A claim of a limited queue whose limit has room takes its budget in one statement (design.md,
-- "Flow control"). {schema} is the quoted schema name; no function body here names a schema.
--
-- Migration 24's claim_budget ran five statements for every claim of a limited queue (the
-- pause, the shard's lock, the limits, the shard's live leases, the bucket's spend): about 95
-- microseconds of server CPU a claim, with a limit too high ever to bind, so that single-job
-- workers drained a limited queue at 82-84% of an unlimited one's rate (BENCHMARKS.md, "This
-- round's costs"). Each statement's start-up (its expressions compiled anew at each execution)
-- was most of it. Here each shard row carries what a claim needs to decide alone:
--
-- * the limit in force once any ramp is over (share, fill, room, fast_from: written whenever
--   the limit is laid out over its shards, queue_limit_reshard), and
-- * live_hint: an upper bound of the live leases claimed under the shard. Every claim under the
--   shard adds what it may take to it (the budget), a claim that took less gives the rest back
--   (claim_settle), and a count resets it; a limit set, ramped or laid out anew makes it
--   unknown (NULL) until the next count. A lease lapses, completes or fails without lowering
--   it: it only overstates, and overstating costs a count, never a lease too many.
--
-- So claim_budget first tries one UPDATE of the first shard no other claim holds, from the one
-- the owner's name picks up to the last: its InitPlan walks the shards' primary key (no sort of
-- the shard rows: a subquery that sorted them and was joined to the UPDATE cost about 10
-- microseconds more a claim) and locks that row FOR UPDATE SKIP LOCKED; the UPDATE spends the
-- tokens and adds the budget to the hint when the whole budget fits under the hint and in the
-- bucket and no ramp is running. When that declines, a SELECT locks the first shard from the
-- owner's that no other claim holds, round to shard 0, and a shard other than the owner's is
-- tried by the same UPDATE first. When the hint may be what failed, a second UPDATE counts the
-- shard's live leases (as migration 24's function counts them), resets the hint to the count
-- when the budget fits, and the first is tried once more. Only when they decline (the limit
-- binds, a ramp runs, the budget is more than a shard holds, every shard is held by other
-- claims, the queue has no limit) does it run migration 24's function, kept whole as
-- claim_budget_counted (which also answers a paused queue with nothing), and add what that took
-- to each shard's hint. (A paused queue's budget taken in one statement is given back whole by
-- claim_settle: the claim statements' own pause check takes no job.)
--
-- Why one statement's view is enough: the first UPDATE reads the shard row through the version
-- its InitPlan locked, by ctid, with the statement's snapshot, so it changes nothing when that
-- version was committed after its snapshot was taken (the ctid finds no version it can see). A
-- shard the SELECT locked is this transaction's until it ends, so each later statement (a new
-- snapshot) sees every claim that wrote it committed. Every claim that took leases under a
-- shard wrote a new version of its row (the hint or the bucket), and every change of the limit
-- writes every shard row (queue_limit_reshard). So a statement that does change the row saw,
-- in its snapshot, every lease claimed under the shard and the limit in force: the hint, the
-- count and the limit it decides on are current.
ALTER TABLE {schema}.queue_limit_shards
    ADD COLUMN live_hint integer,
    ADD COLUMN share integer,
    ADD COLUMN fill double precision,
    ADD COLUMN room double precision,
    ADD COLUMN fast_from timestamptz NOT NULL DEFAULT 'infinity';
COMMENT ON COLUMN {schema}.queue_limit_shards.live_hint IS
    'at least the live leases claimed under this shard; NULL: unknown (the next claim counts)';
COMMENT ON COLUMN {schema}.queue_limit_shards.share IS
    'the cap''s leases this shard holds once any ramp is over; NULL: no cap';
COMMENT ON COLUMN {schema}.queue_limit_shards.fill IS
    'the tokens a second this shard''s bucket fills once any ramp is over; NULL: no rate';
COMMENT ON COLUMN {schema}.queue_limit_shards.room IS
    'the tokens this shard''s bucket holds at most once any ramp is over; NULL: no rate';
COMMENT ON COLUMN {schema}.queue_limit_shards.fast_from IS
    'claims decide in one statement from then on (the ramp''s end); infinity: never (a shard '
    'the limit does not use)';

-- Shard `shard`'s part of a limit as configured (no ramp): its leases of the cap and its share
-- of the bucket (queue_limit_bucket_share), as claim_budget_counted computes them once a ramp is
-- over; fast_from: the ramp's end, or never for a shard past the limit's `shards`.
CREATE FUNCTION {schema}.queue_limit_shard_terms(
    concurrency integer, rate double precision, burst integer, shards integer, shard integer,
    ramp_until timestamptz,
    OUT share integer, OUT fill double precision, OUT room double precision,
    OUT fast_from timestamptz
)
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, {schema}, pg_temp AS $$
SELECT CASE WHEN shard < shards THEN concurrency / shards
                                     + CASE WHEN shard < concurrency % shards THEN 1 ELSE 0 END
       END,
       rate * queue_limit_bucket_share(shards, shard, b.burst),
       CASE WHEN rate IS NOT NULL THEN b.burst * queue_limit_bucket_share(shards, shard, b.burst)
       END,
       CASE WHEN shard < shards THEN coalesce(ramp_until, '-infinity') ELSE 'infinity' END
FROM (SELECT greatest(1.0, coalesce(burst, greatest(1.0, rate)))::double precision AS burst) AS b
$$;

-- As migration 24's, and each shard's terms written beside its bucket, its hint unknown.
CREATE OR REPLACE FUNCTION {schema}.queue_limit_reshard(queue_name text, total double precision)
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
    INSERT INTO queue_limit_shards AS s
        (queue, shard, tokens, tokens_at, live_hint, share, fill, room, fast_from)
    SELECT queue_name, i, coalesce(total * queue_limit_bucket_share(l.shards, i, v_burst), 0), t,
           NULL, x.share, x.fill, x.room, x.fast_from
    FROM generate_series(0, 7) AS i,
         LATERAL queue_limit_shard_terms(l.concurrency, l.rate, l.burst, l.shards, i,
                                         l.ramp_until) AS x
    ON CONFLICT (queue, shard) DO UPDATE
    SET tokens = excluded.tokens, tokens_at = excluded.tokens_at, live_hint = NULL,
        share = excluded.share, fill = excluded.fill, room = excluded.room,
        fast_from = excluded.fast_from;
END
$$;

-- Migration 24's claim_budget, whole: the path of a claim the shard's row alone cannot decide.
ALTER FUNCTION {schema}.claim_budget(text, integer, bigint[], text, integer)
    RENAME TO claim_budget_counted;

-- claim_budget as migration 24 defines it (the same arguments and results, the same budget), in
-- one statement while the limit has room (above), else through claim_budget_counted.
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
    -- The shard the owner's name picks, where claim_budget_counted starts too (NULL, and no
    -- shard tried, without the statement's shard count); set when the first UPDATE declined.
    i integer;
    -- Where the first UPDATE starts its walk: NULL for the owner's shard; then the shard the
    -- SELECT locked.
    k integer;
    counted boolean;  -- (NULL: the shard's leases not counted yet)
BEGIN
    LOOP
        -- The hint, on the first shard from k that no other claim holds (a shard this claim
        -- locked is not skipped): every lease of the budget fits under it, the whole budget in
        -- the bucket (refilled to a clock reading no later than tokens_at's: an UPDATE computes
        -- its new values in column order, tokens before tokens_at). A shard the limit does not
        -- use takes nothing (its fast_from is infinity). The results are set in RETURNING, not
        -- by PL/pgSQL assignments: each of those is an expression set up anew in every
        -- transaction.
        UPDATE queue_limit_shards AS s
        SET tokens = CASE WHEN s.fill IS NULL THEN s.tokens
                          ELSE least(s.room, s.tokens + s.fill * greatest(
                                   date_part('epoch', clock_timestamp() - s.tokens_at), 0.0))
                               - wanted
                     END,
            tokens_at = CASE WHEN s.fill IS NULL THEN s.tokens_at ELSE clock_timestamp() END,
            live_hint = s.live_hint + wanted
        WHERE s.ctid = (
                SELECT q.ctid FROM queue_limit_shards AS q
                WHERE q.queue = queue_name AND wanted > 0 AND q.shard < shard_count
                  AND q.shard >= coalesce(k, CASE WHEN shard_count BETWEEN 1 AND 8
                                                  THEN ((hashtext(owner_name) % shard_count)
                                                        + shard_count) % shard_count END)
                ORDER BY q.shard
                LIMIT 1
                FOR UPDATE SKIP LOCKED)
          AND s.fast_from <= clock_timestamp()
          AND (s.share IS NULL OR s.live_hint + wanted <= s.share)
          AND (s.fill IS NULL
               OR least(s.room, s.tokens + s.fill * greatest(
                      date_part('epoch', clock_timestamp() - s.tokens_at), 0.0)) >= wanted)
        RETURNING wanted, true, array_fill(s.shard, ARRAY[wanted]), s.shard
        INTO budget, settle, shards, held;
        IF FOUND THEN
            RETURN;
        END IF;
        EXIT WHEN counted;
        IF k IS NULL THEN
            -- The first shard from the owner's that no other claim holds, round to shard 0 (one
            -- this claim locked already is not skipped), locked; one other than the owner's is
            -- tried by its hint first.
            i := CASE WHEN shard_count BETWEEN 1 AND 8
                      THEN ((hashtext(owner_name) % shard_count) + shard_count) % shard_count END;
            SELECT q.shard INTO k
            FROM queue_limit_shards AS q
            WHERE q.queue = queue_name AND q.shard < shard_count AND wanted > 0
            ORDER BY q.shard < i, q.shard
            LIMIT 1
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            CONTINUE WHEN k <> i;
        END IF;
        counted := true;
        -- The count, when the hint may be what failed: the shard's live leases, counted as
        -- claim_budget_counted counts them, and the hint reset to them (then the hint again).
        UPDATE queue_limit_shards AS s
        SET live_hint = n.live
        FROM queue_limits AS l,
             LATERAL (
                 SELECT count(*)::integer AS live
                 FROM jobs AS j
                 WHERE j.status = 'Processing' AND j.queue = queue_name
                   AND j.lease_until >= now()
                   AND ((coalesce(j.limit_shard::integer, (j.id % 8)::integer) % l.shards)
                        + l.shards) % l.shards = k
                   AND NOT (j.id = ANY (coalesce(done_ids, '{}')) AND j.lease_owner = owner_name)
             ) AS n
        WHERE s.queue = queue_name AND s.shard = k
          AND l.queue = queue_name AND s.fast_from <= clock_timestamp()
          AND s.share IS NOT NULL AND (s.live_hint IS NULL OR s.live_hint + wanted > s.share)
          AND n.live + wanted <= s.share;
        EXIT WHEN NOT FOUND;
    END LOOP;
    SELECT b.budget, b.settle, b.shards, b.held, b.wait INTO budget, settle, shards, held, wait
    FROM claim_budget_counted(queue_name, wanted, done_ids, owner_name, shard_count) AS b;
    -- What it may take counts in each shard's hint (a new version of each such row, whose lock
    -- this claim holds: see above).
    IF budget > 0 AND shards IS NOT NULL THEN
        UPDATE queue_limit_shards AS s SET live_hint = s.live_hint + r.n
        FROM (SELECT u.shard, count(*)::integer AS n FROM unnest(shards) AS u(shard)
              GROUP BY u.shard) AS r
        WHERE s.queue = queue_name AND s.shard = r.shard;
    END IF;
END
$$;

-- As migration 24's, and the budget's leases the claim did not take leave their shards' hints.
CREATE OR REPLACE FUNCTION {schema}.claim_settle(
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
    IF used < budget THEN
        -- (fill is NULL exactly when the limit has no rate: queue_limit_shard_terms.)
        UPDATE queue_limit_shards AS q
        SET tokens = CASE WHEN q.fill IS NOT NULL THEN q.tokens + r.n ELSE q.tokens END,
            live_hint = q.live_hint - r.n
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

-- The queues limited before this migration: their shards' terms (their hints unknown).
UPDATE {schema}.queue_limit_shards AS s
SET (share, fill, room, fast_from) = (
    SELECT x.share, x.fill, x.room, x.fast_from
    FROM {schema}.queue_limits AS l,
         LATERAL {schema}.queue_limit_shard_terms(l.concurrency, l.rate, l.burst, l.shards,
                                                  s.shard, l.ramp_until) AS x
    WHERE l.queue = s.queue
);

REVOKE ALL ON FUNCTION {schema}.queue_limit_shard_terms FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_budget FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.claim_budget_counted FROM PUBLIC;

-- Roles granted by an older leasectl keep claiming after this upgrade: whoever could run
-- claim_budget (now claim_budget_counted: its grants went with it) runs the new one, and no
-- longer the old one (the new one runs it as its owner).
CREATE FUNCTION pg_temp.leasectl_carry_grants() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, {schema}, pg_temp AS $$
DECLARE
    role_name text;
BEGIN
    FOR role_name IN
        SELECT DISTINCT a.grantee::regrole::text
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'claim_budget_counted'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee NOT IN (0, p.proowner)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION claim_budget TO %s', role_name);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION claim_budget_counted FROM %s', role_name);
    END LOOP;
END
$$;
SELECT pg_temp.leasectl_carry_grants();
DROP FUNCTION pg_temp.leasectl_carry_grants();
