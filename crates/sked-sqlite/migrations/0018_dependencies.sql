-- Tasks that wait for other tasks (docs/decisions/0012-tasks-that-wait-for-tasks.md). A task
-- with a parent that has not succeeded is 'waiting'. What it waits for lives here, not in the
-- task row: every update of a task rebuilds its whole row, so each column there costs every
-- claim and ending, with parents or without.
-- Each dependency; `done` once the parent's end has been counted; `run_anyway` when the child
-- runs whatever way that parent ends (`on_parent_failure: run`).
CREATE TABLE task_edges (
    child      INTEGER NOT NULL,
    parent     INTEGER NOT NULL,
    done       INTEGER NOT NULL DEFAULT 0,
    run_anyway INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (child, parent)
) WITHOUT ROWID;
CREATE INDEX task_edges_parent ON task_edges (parent, child);
-- The edges not counted yet: an ending asks here, in one probe, whether any task waits at all.
CREATE INDEX task_edges_open ON task_edges (parent) WHERE done = 0;
-- 'waiting' is unfinished: the indexes over the unfinished states take it in.
DROP INDEX tasks_unique_key;
CREATE UNIQUE INDEX tasks_unique_key ON tasks (unique_key)
    WHERE unique_key IS NOT NULL
      AND (state = 'waiting' OR state = 'scheduled' OR state = 'available' OR state = 'running' OR state = 'retrying');
DROP INDEX tasks_schedule_active;
CREATE INDEX tasks_schedule_active ON tasks (schedule, id)
    WHERE schedule IS NOT NULL
      AND (state = 'waiting' OR state = 'scheduled' OR state = 'available' OR state = 'running' OR state = 'retrying');
-- Waiting tasks by queue, for the queue counts.
CREATE INDEX tasks_waiting_for_parents ON tasks (queue) WHERE state = 'waiting';
