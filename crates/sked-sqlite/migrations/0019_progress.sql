-- What a running attempt last reported of its progress with a heartbeat. A table of its own:
-- the task row is rebuilt by every update, and most tasks never report progress.
CREATE TABLE task_progress (
    task_id  INTEGER PRIMARY KEY,
    attempt  INTEGER NOT NULL,
    progress TEXT    NOT NULL  -- JSON
);
