-- Placeholder (branch fcost only): migration 020 belongs to another branch merged separately;
-- it keeps the numbering without gaps so that 024 runs here. Delete it at the merge.
SELECT 1;
