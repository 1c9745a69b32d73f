-- Schedules by the bytes of their names, whatever the database's collation: pages by name and
-- listing by prefix are a range of this index, in the order SQLite keeps them. (The column
-- keeps the database's collation, so that comparing it with tasks' and the ledger's schedule
-- columns can use their indexes.)
CREATE INDEX sked_schedules_name_bytes ON sked_schedules ((name COLLATE "C"));
