-- Batches: tasks tagged together, and callbacks enqueued once when they have ended after the
-- batch was closed (docs/decisions/0014-batches.md). `state`: open, closed, done (callbacks
-- enqueued); `size`: how many tasks joined; the callbacks as the API takes a task and the
-- tasks they became. A batch's row is what its joins, ends and close lock, one at a time.
CREATE TABLE sked_batches (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text,
    state         text NOT NULL DEFAULT 'open',
    created_at    timestamptz NOT NULL,
    closed_at     timestamptz,
    done_at       timestamptz,
    size          bigint NOT NULL DEFAULT 0,
    on_success    jsonb,
    on_complete   jsonb,
    success_task  bigint,
    complete_task bigint
);
-- Which batch a task joined, beside the task row; `open` until the task has ended. A task
-- that joins a batch is flagged `has_children` (its end is counted elsewhere), so endings
-- take the path that tells its batch.
CREATE TABLE sked_batch_tasks (
    task  bigint PRIMARY KEY,
    batch bigint NOT NULL,
    open  boolean NOT NULL DEFAULT true
);
CREATE INDEX sked_batch_tasks_by_batch ON sked_batch_tasks (batch, task);
CREATE INDEX sked_batch_tasks_open ON sked_batch_tasks (batch) WHERE open;
