-- What an incident asks of the history (`leasectl errors`, design.md, "Errors and events").
--
-- The failed attempts by the time they ended, newest first: `errors` reads the last ones of a
-- window through it, whatever the size of job_attempts (10M finished jobs: without it, a scan
-- of every attempt). Partial: only failures, a small part of the attempts, are in it, and an
-- attempt enters it once, when its failure is written (a running attempt's heartbeat does not
-- touch it: outcome and ended_at change together, once).
CREATE INDEX job_attempts_failed_idx ON {schema}.job_attempts (ended_at)
    WHERE outcome = 'failed';
