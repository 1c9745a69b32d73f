-- Workflows: tasks made together that wait for one another by names of their own
-- (docs/decisions/0013-workflows.md). `size` is how many tasks it was made with.
CREATE TABLE sked_workflows (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text,
    created_at timestamptz NOT NULL,
    size       bigint NOT NULL,
    schedule   text,
    nominal_at timestamptz
);
-- Which workflow a task belongs to and its name there, beside the task row as on SQLite.
CREATE TABLE sked_workflow_tasks (
    task     bigint PRIMARY KEY,
    workflow bigint NOT NULL,
    name     text NOT NULL
);
CREATE INDEX sked_workflow_tasks_by_workflow ON sked_workflow_tasks (workflow, task);
