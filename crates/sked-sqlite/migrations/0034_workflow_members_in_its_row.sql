-- A workflow's tasks as the range of ids they were made with, and their names in one JSON
-- array by place in it (docs/decisions/0025-sqlite-workflow-members-as-a-range.md). A
-- workflow's tasks are made in one write, so their ids follow one another, and ids are never
-- reused (AUTOINCREMENT): every task in the range is one of them.
ALTER TABLE workflows ADD COLUMN first_task INTEGER;
ALTER TABLE workflows ADD COLUMN last_task INTEGER;
ALTER TABLE workflows ADD COLUMN names TEXT NOT NULL DEFAULT '[]';
UPDATE workflows SET
    first_task = (SELECT min(m.task) FROM workflow_tasks m WHERE m.workflow = workflows.id),
    last_task = (SELECT max(m.task) FROM workflow_tasks m WHERE m.workflow = workflows.id);
-- A task deleted since leaves a null in its place.
UPDATE workflows SET names = (
    WITH RECURSIVE o(k) AS (
        SELECT 0 UNION ALL SELECT k + 1 FROM o WHERE k < workflows.last_task - workflows.first_task)
    SELECT json_group_array(m.name ORDER BY o.k)
    FROM o LEFT JOIN workflow_tasks m ON m.task = workflows.first_task + o.k)
WHERE first_task IS NOT NULL;
DROP TABLE workflow_tasks;
CREATE INDEX workflows_by_first_task ON workflows (first_task);
