-- Failed attempts per minute, for the dashboard's activity chart.
CREATE INDEX task_attempts_finished ON task_attempts (finished_at) WHERE outcome = 'failed';

-- Processes that work or serve: workers (claims and presence beats) and server nodes.
CREATE TABLE workers (
    id           TEXT    PRIMARY KEY,
    role         TEXT    NOT NULL,            -- 'worker' or 'node'
    queues       TEXT    NOT NULL,            -- JSON array; empty: all queues
    concurrency  INTEGER,
    started_at   INTEGER NOT NULL,
    last_seen_at INTEGER NOT NULL,
    stopped_at   INTEGER                      -- said goodbye; NULL while it runs
);
CREATE INDEX workers_last_seen ON workers (last_seen_at);
