-- A schedule whose failed run keeps retrying after the next occurrence is planned (by default
-- its retries end there).
ALTER TABLE sked_schedules ADD COLUMN keep_retrying boolean NOT NULL DEFAULT false;
