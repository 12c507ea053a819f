-- The bounds of the limits' shard rows (migration 24's queue_limit_shards_bounded) checked when
-- a shard row is made, not by every claim of a limited queue (design.md, "Flow control").
-- {schema} is the quoted schema name; no function body here names a schema.
--
-- PostgreSQL reads every CHECK constraint of a table from its stored text at each statement
-- that inserts or updates a row of it (migration 32). The shards' CHECK is read by the one
-- statement of a limited queue's claim that writes a row, claim_budget's UPDATE of the claim's
-- shard: about a fifth of claim_budget's time, 19-23 microseconds a claim on a slow day
-- (BENCHMARKS.md, "This round's costs").
--
-- Only the owner's functions write shard rows (no role is granted INSERT, UPDATE or DELETE on
-- them). queue_limit_reshard makes them with INSERT ... ON CONFLICT DO UPDATE: the row it
-- proposes (its shard, its first tokens) is checked by the trigger below, as the CHECK checked
-- it, before the conflict is looked for. No statement changes a shard's number. The claims
-- change tokens, the hint and the throttled count only, and keep tokens between 0 and the
-- shard's room by their own conditions: a claim takes what the bucket, refilled to at most its
-- room, holds, and a settle gives back what its claim took and did not use, under the row lock
-- the claim took. (A claim's condition and its new value read the clock apart: a wall clock
-- stepped back between the two may leave a fraction of a token below 0, which the next refill
-- makes good; the CHECK failed that claim's whole round trip, its completions too.)
--
-- A trigger only on INSERT: a BEFORE UPDATE row trigger, even one limited to columns the
-- claims do not set, has PostgreSQL lock each updated row again for it.
ALTER TABLE {schema}.queue_limit_shards DROP CONSTRAINT queue_limit_shards_bounded;

CREATE FUNCTION {schema}.queue_limit_shards_bounds_refused() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION
        'new row for relation "%" violates check constraint "queue_limit_shards_bounded"',
        TG_TABLE_NAME
        USING ERRCODE = 'check_violation', CONSTRAINT = 'queue_limit_shards_bounded',
              TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
              DETAIL = 'shard is 0 to 7, tokens 0 to 1000000.';
END
$$;

-- (No role calls it: not PUBLIC's to run, like the limits' other functions.)
REVOKE ALL ON FUNCTION {schema}.queue_limit_shards_bounds_refused FROM PUBLIC;

CREATE TRIGGER queue_limit_shards_bounded
    BEFORE INSERT ON {schema}.queue_limit_shards
    FOR EACH ROW
    WHEN (NOT (NEW.shard BETWEEN 0 AND 7 AND NEW.tokens >= 0 AND NEW.tokens <= 1000000))
    EXECUTE FUNCTION {schema}.queue_limit_shards_bounds_refused();
