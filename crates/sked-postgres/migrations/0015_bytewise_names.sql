-- Schedule names sort by their bytes, whatever the database's collation: pages by name and
-- listing by prefix are then a range of the primary key, the same on every database and on
-- SQLite.
ALTER TABLE sked_schedules ALTER COLUMN name TYPE text COLLATE "C";
