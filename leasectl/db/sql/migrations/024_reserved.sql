-- Reserved: this number belongs to a migration of another branch, merged separately. This file
-- only keeps the numbers without gaps on this branch; the merge replaces it with that migration.
SELECT 1;
