-- The Pending owner index (migration 13) carries what the console's owner filter reads from
-- each match: run_at and id (the Pending panel shows the first 100 by run_at, id) and queue
-- (the queue filter). {schema} is the quoted schema name.
--
-- With the owner alone in it, the panel read every matching row from the table to learn its
-- run_at: a filter matching 55,000 requeued jobs of a 10,000,000-job backlog (the owner prefix
-- of eleven of twenty workers) cost 272 ms a refresh, all of it in random reads of the table.
-- Now it is an index-only scan (on pages the visibility map marks all-visible, which vacuum
-- does for a backlog that sits): 31 ms on the same database. The cost still grows with what
-- the filter matches, never with the backlog. An entry is about 28 bytes longer; it is written
-- only for Pending jobs that have an owner (requeued, retried, released), never by enqueue or
-- the claim of a fresh job.
--
-- Built beside the old one, which is then dropped and its name taken, so the index keeps its
-- name. Building it reads the jobs table once, in this transaction, and blocks writes to jobs
-- meanwhile (1.1 s for a table of 10,000,000 Pending jobs, 100,000 of them with an owner).
CREATE INDEX jobs_pending_owner_covering_idx ON {schema}.jobs (lease_owner COLLATE "C")
    INCLUDE (run_at, id, queue)
    WHERE status = 'Pending' AND lease_owner IS NOT NULL;
DROP INDEX {schema}.jobs_pending_owner_idx;
ALTER INDEX {schema}.jobs_pending_owner_covering_idx RENAME TO jobs_pending_owner_idx;
