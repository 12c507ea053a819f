-- Stand-in for migration 15, which another branch adds: migrations are numbered
-- without gaps, and this branch's is 16. Delete this file when merging that branch's 015.
SELECT 1;
