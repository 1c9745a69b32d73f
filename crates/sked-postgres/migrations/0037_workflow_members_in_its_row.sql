-- A workflow's tasks and their names there, in id order, are kept in the workflow's row, and
-- each task names its workflow. A row per member (with its key and an index by workflow) cost
-- the making of a 10,000-task workflow about 20 ms of server time, in its one transaction.
ALTER TABLE sked_workflows ADD COLUMN tasks bigint[] NOT NULL DEFAULT '{}',
                           ADD COLUMN names text[] NOT NULL DEFAULT '{}';
ALTER TABLE sked_tasks ADD COLUMN workflow bigint;
UPDATE sked_workflows wf SET tasks = m.tasks, names = m.names
  FROM (SELECT workflow, array_agg(task ORDER BY task) AS tasks,
               array_agg(name ORDER BY task) AS names
          FROM sked_workflow_tasks GROUP BY workflow) m
 WHERE m.workflow = wf.id;
UPDATE sked_tasks t SET workflow = m.workflow FROM sked_workflow_tasks m WHERE m.task = t.id;
DROP TABLE sked_workflow_tasks;
-- Large arrays written in the making's transaction are stored out of line without
-- compression: compressing a 10,000-task workflow's two arrays took 7 of the 10 ms its update
-- took, and a stage's ids in its wait likewise.
ALTER TABLE sked_workflows ALTER COLUMN tasks SET STORAGE EXTERNAL,
                           ALTER COLUMN names SET STORAGE EXTERNAL;
ALTER TABLE sked_waits ALTER COLUMN tasks SET STORAGE EXTERNAL;
