-- Queue rate limits: at most rate_limit starts in any window of rate_period_ms. The starts
-- that count are logged per claim, one row per queue and claim, and dropped once out of
-- every window.
ALTER TABLE sked_queues
    ADD COLUMN rate_limit     integer,
    ADD COLUMN rate_period_ms bigint;

CREATE TABLE sked_queue_starts (
    queue      text        NOT NULL,
    started_at timestamptz NOT NULL,
    n          integer     NOT NULL
);
CREATE INDEX sked_queue_starts_window ON sked_queue_starts (queue, started_at);
