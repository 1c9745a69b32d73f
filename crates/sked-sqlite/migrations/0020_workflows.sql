-- Workflows: tasks made together that wait for one another by names of their own
-- (docs/decisions/0013-workflows.md). `size` is how many tasks it was made with.
CREATE TABLE workflows (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT,
    created_at INTEGER NOT NULL,
    size       INTEGER NOT NULL,
    schedule   TEXT,
    nominal_at INTEGER
);
-- Which workflow a task belongs to and its name there: beside the task row, not in it, for
-- the reason given in 0018.
CREATE TABLE workflow_tasks (
    task     INTEGER PRIMARY KEY,
    workflow INTEGER NOT NULL,
    name     TEXT NOT NULL
);
CREATE INDEX workflow_tasks_by_workflow ON workflow_tasks (workflow, task);
