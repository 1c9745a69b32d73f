-- A task's deadline to start (docs/decisions/0018-expiry.md). Not started by then, it ends
-- 'expired', a finished state: the finished tasks' index takes it in. The tasks that can
-- expire are indexed by their deadline; a task without one enters no new index.
ALTER TABLE tasks ADD COLUMN expires_at INTEGER;
CREATE INDEX tasks_expiring ON tasks (expires_at)
    WHERE expires_at IS NOT NULL AND attempt = 0
      AND (state = 'waiting' OR state = 'scheduled' OR state = 'available');
DROP INDEX tasks_finished;
CREATE INDEX tasks_finished ON tasks (queue, state, finished_at)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'cancelled' OR state = 'expired');
