-- A waiting task's count of parents not yet counted, in a table of its own so that the task
-- row (rewritten by every claim and ending) stays as it is: a parent's end counts its children
-- down here instead of rewriting an edge each. An edge's `done` now says that the edge was
-- counted in an earlier life of its parent (it had ended when the child was made, or it ended
-- and was retried), so that an end counts each edge once.
CREATE TABLE task_parents_left (
    task         INTEGER PRIMARY KEY,
    parents_left INTEGER NOT NULL
);
INSERT INTO task_parents_left (task, parents_left)
    SELECT child, count(*) FROM task_edges WHERE done = 0 GROUP BY child;
-- An end reads its children, whether each edge was counted and what a failed parent does to
-- the child from this index alone.
DROP INDEX task_edges_open_child;
DROP INDEX task_edges_parent;
CREATE INDEX task_edges_parent ON task_edges (parent, child, done, run_anyway);
