-- Schedule policies: where an interval counts from, jitter, the DST policy, and pausing after
-- dead runs in a row (why it paused, and since when runs count after a resume, microseconds).
ALTER TABLE schedules ADD COLUMN interval_from TEXT NOT NULL DEFAULT 'fixed';
ALTER TABLE schedules ADD COLUMN jitter_ms INTEGER;
ALTER TABLE schedules ADD COLUMN dst TEXT NOT NULL DEFAULT 'debian';
ALTER TABLE schedules ADD COLUMN pause_after_failures INTEGER;
ALTER TABLE schedules ADD COLUMN paused_reason TEXT;
ALTER TABLE schedules ADD COLUMN resumed_at INTEGER;
