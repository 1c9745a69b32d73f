-- Failed attempts per minute, for the dashboard's activity chart.
CREATE INDEX sked_task_attempts_finished ON sked_task_attempts (finished_at) WHERE outcome = 'failed';

-- Processes that work or serve: workers (claims and presence beats) and server nodes.
CREATE TABLE sked_workers (
    id           text        PRIMARY KEY,
    role         text        NOT NULL,        -- 'worker' or 'node'
    queues       text[]      NOT NULL,        -- empty: all queues
    concurrency  integer,
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    stopped_at   timestamptz                  -- said goodbye; NULL while it runs
);
CREATE INDEX sked_workers_last_seen ON sked_workers (last_seen_at);
