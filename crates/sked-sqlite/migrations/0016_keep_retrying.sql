-- A schedule whose failed run keeps retrying after the next occurrence is planned (by default
-- its retries end there).
ALTER TABLE schedules ADD COLUMN keep_retrying INTEGER NOT NULL DEFAULT 0;
