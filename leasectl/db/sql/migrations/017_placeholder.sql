-- A placeholder for the migration 17 of another branch (queue limits), so that this branch's
-- migration 18 applies in order. It changes nothing; the merge replaces it with the real one.
SELECT 1;
