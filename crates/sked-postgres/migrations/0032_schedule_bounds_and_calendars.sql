-- A schedule's bounds: no occurrence before start_at nor after end_at, and at most max_runs
-- runs at its occurrences; runs counts those it has made.
ALTER TABLE sked_schedules ADD COLUMN start_at timestamptz;
ALTER TABLE sked_schedules ADD COLUMN end_at timestamptz;
ALTER TABLE sked_schedules ADD COLUMN max_runs bigint;
ALTER TABLE sked_schedules ADD COLUMN runs bigint NOT NULL DEFAULT 0;
-- Calendars: dates (`2026-12-25,2027-01-01`) on which the schedules that skip them (a JSON
-- array of names) do not fire.
CREATE TABLE sked_calendars (
    name       text        PRIMARY KEY,
    dates      text        NOT NULL,
    tz         text,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
ALTER TABLE sked_schedules ADD COLUMN skip_calendars text;
