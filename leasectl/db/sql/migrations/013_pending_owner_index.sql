-- The Pending jobs that a worker held before (requeued, retried or released: lease_owner is kept
-- for diagnosis), by that owner, for the console's owner filter. Without it, filtering the
-- Pending panel by an owner reads every Pending row: on a backlog of millions, the incident,
-- each refresh took seconds. {schema} is the quoted schema name.
--
-- Fresh jobs have no owner and are not in it, so enqueue and the claim of a fresh job do not
-- write to it. "C" collation: code point order, in which a prefix's matches are one range
-- (lease_owner >= prefix AND lease_owner < the prefix's end, computed by the client), the one
-- form of a prefix match a generic plan can walk. Building it reads the table once, in this
-- transaction, and blocks writes to jobs meanwhile.
CREATE INDEX jobs_pending_owner_idx ON {schema}.jobs (lease_owner COLLATE "C")
    WHERE status = 'Pending' AND lease_owner IS NOT NULL;
