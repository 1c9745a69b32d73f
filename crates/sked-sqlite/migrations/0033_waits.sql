-- Tasks with the same parents wait together
-- (docs/decisions/0022-tasks-with-the-same-parents-wait-together.md). A wait holds one count
-- of parents not yet counted and what a failed parent does to its tasks; each task with
-- parents names its wait. A stage of a workflow (tasks made together with the same parents)
-- is one wait, and a task that waits for a whole stage waits for that wait's tasks through one
-- row, however many they are.
CREATE TABLE waits (
    id           INTEGER PRIMARY KEY,
    parents_left INTEGER NOT NULL,
    run_anyway   INTEGER NOT NULL
);
ALTER TABLE tasks ADD COLUMN wait INTEGER;
-- A wait's tasks, which a release or a cancel moves and the readers list. Only an insert
-- writes this index: SQLite updates an index only when a column it holds or its condition
-- reads changes, and a task's wait never does, so claims and endings leave it alone.
CREATE INDEX tasks_by_wait ON tasks (wait) WHERE wait IS NOT NULL;
-- A wait waits for a task. `done` says that the parent's end was counted in an earlier life
-- of the parent (it had ended when the wait was made, or ended and was retried by hand), so
-- that an end counts each wait once.
CREATE TABLE wait_parents (
    parent INTEGER NOT NULL,
    wait   INTEGER NOT NULL,
    done   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (parent, wait)
) WITHOUT ROWID;
CREATE INDEX wait_parents_by_wait ON wait_parents (wait, parent);
-- A wait waits for every task of another wait (`stage`): the fan-in after a stage.
CREATE TABLE wait_stages (
    stage INTEGER NOT NULL,
    wait  INTEGER NOT NULL,
    PRIMARY KEY (stage, wait)
) WITHOUT ROWID;
CREATE INDEX wait_stages_by_wait ON wait_stages (wait, stage);
-- A task of a stage whose end a wait counted before the task was retried by hand.
CREATE TABLE wait_counted (
    task INTEGER NOT NULL,
    wait INTEGER NOT NULL,
    PRIMARY KEY (task, wait)
) WITHOUT ROWID;
-- Each task with parents gets a wait of its own, numbered as the task, with its count and
-- its edges.
INSERT INTO waits (id, parents_left, run_anyway)
    SELECT e.child, coalesce(l.parents_left, 0), max(e.run_anyway)
    FROM task_edges e LEFT JOIN task_parents_left l ON l.task = e.child
    GROUP BY e.child;
UPDATE tasks SET wait = id WHERE id IN (SELECT id FROM waits);
INSERT INTO wait_parents (parent, wait, done) SELECT parent, child, done FROM task_edges;
DROP TABLE task_edges;
DROP TABLE task_parents_left;
