-- Room, in the pages that status changes rewrite, for the versions they write. {schema} is the
-- quoted schema name.
--
-- Every status change of a job (claim, complete, fail, release, a watcher's requeue) is a
-- non-HOT update: status is in the predicate of the partial indexes. Each one adds an entry for
-- the new version to the primary key, beside the old one. With leaves filled to 90% (the
-- default), the page is soon full, and each further insert there first runs a bottom-up deletion
-- pass: it visits the heap to find which of the page's versions are dead. That was 8% of a
-- watcher pass's server time (perf, 100,000 expired leases; 2% with this). Leaves split at 70%
-- leave room until vacuum removes the old entries. (This applies to pages split from now on: an existing
-- index keeps its pages as they are until it is rebuilt.)
ALTER INDEX {schema}.jobs_pkey SET (fillfactor = 70);

-- An attempt row grows when it ends (ended_at, outcome, the error text). At 85%, 35% of the
-- watcher's closes of 100,000 attempts did not fit on their page: the new version went to
-- another page, with an entry in the primary key. At 70%, 19%; the rest are HOT updates.
ALTER TABLE {schema}.job_attempts SET (fillfactor = 70);
ALTER INDEX {schema}.job_attempts_pkey SET (fillfactor = 70);
