-- Queue rate limits: at most rate_limit starts in any window of rate_period_ms. The starts
-- that count are logged per claim, one row per queue and claim, and dropped once out of
-- every window.
ALTER TABLE queues ADD COLUMN rate_limit INTEGER;
ALTER TABLE queues ADD COLUMN rate_period_ms INTEGER;

CREATE TABLE queue_starts (
    queue      TEXT    NOT NULL,
    started_at INTEGER NOT NULL,
    n          INTEGER NOT NULL
);
CREATE INDEX queue_starts_window ON queue_starts (queue, started_at);
