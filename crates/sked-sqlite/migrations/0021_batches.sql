-- Batches: tasks tagged together, and callbacks enqueued once when they have ended after the
-- batch was closed (docs/decisions/0014-batches.md). `state`: open, closed, done (callbacks
-- enqueued); `size`: how many tasks joined; the callbacks as the API takes a task (JSON) and
-- the tasks they became.
CREATE TABLE batches (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT,
    state         TEXT NOT NULL DEFAULT 'open',
    created_at    INTEGER NOT NULL,
    closed_at     INTEGER,
    done_at       INTEGER,
    size          INTEGER NOT NULL DEFAULT 0,
    on_success    TEXT,
    on_complete   TEXT,
    success_task  INTEGER,
    complete_task INTEGER
);
-- Which batch a task joined, beside the task row (see 0018); `open` until the task has ended.
CREATE TABLE batch_tasks (
    task  INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL,
    open  INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX batch_tasks_by_batch ON batch_tasks (batch, task);
-- The tasks not ended yet: an ending asks here, in one probe, whether any batch waits at all.
CREATE INDEX batch_tasks_open ON batch_tasks (batch) WHERE open = 1;
