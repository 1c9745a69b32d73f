-- A schedule's bounds: no occurrence before start_at nor after end_at, and at most max_runs
-- runs at its occurrences; runs counts those it has made.
ALTER TABLE schedules ADD COLUMN start_at INTEGER;
ALTER TABLE schedules ADD COLUMN end_at INTEGER;
ALTER TABLE schedules ADD COLUMN max_runs INTEGER;
ALTER TABLE schedules ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
-- Calendars: dates (`2026-12-25,2027-01-01`) on which the schedules that skip them (a JSON
-- array of names) do not fire.
CREATE TABLE calendars (
    name       TEXT PRIMARY KEY,
    dates      TEXT    NOT NULL,
    tz         TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
ALTER TABLE schedules ADD COLUMN skip_calendars TEXT;
