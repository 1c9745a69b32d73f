-- A task's deadline to start (docs/decisions/0018-expiry.md). Not started by then, it ends
-- 'expired', a finished state: the indexes over finished tasks take it in. The tasks that
-- can expire are indexed by their deadline; a task without one enters no new index.
ALTER TABLE sked_tasks DROP CONSTRAINT sked_tasks_state_check;
ALTER TABLE sked_tasks ADD CONSTRAINT sked_tasks_state_check CHECK (state IN
    ('waiting', 'scheduled', 'available', 'running', 'retrying', 'succeeded', 'dead', 'cancelled',
     'expired')) NOT VALID;
ALTER TABLE sked_tasks VALIDATE CONSTRAINT sked_tasks_state_check;
ALTER TABLE sked_tasks ADD COLUMN expires_at timestamptz;
CREATE INDEX sked_tasks_expiring ON sked_tasks (expires_at)
    WHERE expires_at IS NOT NULL AND attempt = 0 AND state IN ('waiting', 'scheduled', 'available');
DROP INDEX sked_tasks_finished_queue;
CREATE INDEX sked_tasks_finished_queue ON sked_tasks (queue, state, finished_at)
    WHERE state IN ('succeeded', 'dead', 'cancelled', 'expired');
DROP INDEX sked_tasks_schedule_finished;
CREATE INDEX sked_tasks_schedule_finished ON sked_tasks (schedule, id)
    WHERE schedule IS NOT NULL AND state IN ('succeeded', 'dead', 'cancelled', 'expired');
