-- (reserved: written in a later commit)
SELECT 1;
