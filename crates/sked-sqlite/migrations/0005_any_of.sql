-- The partial indexes over three or more states spell their group as a disjunction instead of
-- an `IN` list: SQLite builds a temporary b-tree for an `IN` list of three or more constants
-- each time a statement runs, and a statement that writes a task evaluates every partial
-- index's predicate, so one-row statements paid more for these lists than for the write.
-- Statements repeat the disjunction word for word (sked_store::states::ACTIVE_ANY and
-- FINISHED_ANY) to use these indexes.
DROP INDEX tasks_unique_key;
CREATE UNIQUE INDEX tasks_unique_key ON tasks (unique_key)
    WHERE unique_key IS NOT NULL
      AND (state = 'scheduled' OR state = 'available' OR state = 'running' OR state = 'retrying');
DROP INDEX tasks_schedule_active;
CREATE INDEX tasks_schedule_active ON tasks (schedule, id)
    WHERE schedule IS NOT NULL
      AND (state = 'scheduled' OR state = 'available' OR state = 'running' OR state = 'retrying');
DROP INDEX tasks_finished;
CREATE INDEX tasks_finished ON tasks (finished_at)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'cancelled');
DROP INDEX tasks_finished_queue;
CREATE INDEX tasks_finished_queue ON tasks (queue, state)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'cancelled');
