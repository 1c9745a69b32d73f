-- What a running attempt last reported of its progress with a heartbeat. A table of its own:
-- heartbeats without progress, most of them, stay the update of one column they were.
CREATE TABLE sked_task_progress (
    task_id  bigint  PRIMARY KEY,
    attempt  integer NOT NULL,
    progress jsonb   NOT NULL
);
