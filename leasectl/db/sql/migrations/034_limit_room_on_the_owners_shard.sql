-- A claim of a limited queue whose limit has room looks for its shard in the primary key's
-- order (design.md, "Flow control"). {schema} is the quoted schema name; no function body here
-- names a schema.
--
-- Migration 33's one-statement path found the first shard no other claim held, from the
-- owner's, in a subquery that sorted the queue's shard rows, locked the first and joined it to
-- the UPDATE by ctid: a Sort, a join and the owner's shard computed in PL/pgSQL, set up anew at
-- every claim. Here the first UPDATE's InitPlan walks the primary key from the owner's shard up
-- to the last one, locks the first row no other claim holds (FOR UPDATE SKIP LOCKED), and the
-- UPDATE changes that version, found by ctid: about 10 microseconds less server CPU a claim
-- (BENCHMARKS.md, "This round's costs"). Only when that declines (its hint or its bucket is
-- short, or every shard from the owner's to the last is held) does a SELECT lock the first
-- shard from the owner's that no other claim holds, wrapping round to shard 0 (as migration
-- 33's subquery chose it); then, as in migration 33: the hint on that shard, a count of its
-- live leases when the hint may be what failed, the hint again, and claim_budget_counted for
-- what these decline.
--
-- Why one statement's view is still enough: the first UPDATE reads the row through the locked
-- version's ctid with its own snapshot, as migration 33's did (a version committed after the
-- snapshot is not found: nothing changes). A shard locked by the SELECT is this transaction's
-- until it ends: every claim that took leases under it wrote its row, so each later statement
-- here (a new snapshot) sees them all committed, and no other claim takes leases under it.
CREATE OR REPLACE FUNCTION {schema}.claim_budget(
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
    -- this claim holds: see migration 33).
    IF budget > 0 AND shards IS NOT NULL THEN
        UPDATE queue_limit_shards AS s SET live_hint = s.live_hint + r.n
        FROM (SELECT u.shard, count(*)::integer AS n FROM unnest(shards) AS u(shard)
              GROUP BY u.shard) AS r
        WHERE s.queue = queue_name AND s.shard = r.shard;
    END IF;
END
$$;
