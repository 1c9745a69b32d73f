-- Schedule policies: where an interval counts from, jitter, the DST policy, and pausing after
-- dead runs in a row (why it paused, and since when runs count after a resume).
ALTER TABLE sked_schedules
    ADD COLUMN interval_from        text NOT NULL DEFAULT 'fixed',
    ADD COLUMN jitter_ms            bigint,
    ADD COLUMN dst                  text NOT NULL DEFAULT 'debian',
    ADD COLUMN pause_after_failures integer,
    ADD COLUMN paused_reason        text,
    ADD COLUMN resumed_at           timestamptz;
