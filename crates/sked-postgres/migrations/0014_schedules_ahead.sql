-- Schedules are planned ahead of their occurrences, by every node. `look_at` is when a schedule
-- needs planning next (NULL: never, as while paused); `awaits_run` says that an outcome waits
-- for one of its runs to end, so that a run's end has it planned at once.
ALTER TABLE sked_schedules
    ADD COLUMN look_at timestamptz,
    ADD COLUMN awaits_run boolean NOT NULL DEFAULT false;
UPDATE sked_schedules SET look_at = CASE WHEN buffered_at IS NOT NULL THEN updated_at ELSE next_fire_at END
    WHERE NOT paused;
CREATE INDEX sked_schedules_look ON sked_schedules (look_at) WHERE look_at IS NOT NULL;
-- The few schedules waiting for a run to end, which a run's end has planned at once.
CREATE INDEX sked_schedules_awaiting ON sked_schedules (name) WHERE awaits_run;
-- A schedule's unfinished tasks (for overlap, and its next run made ahead), without walking
-- the tasks it ran before.
CREATE INDEX sked_tasks_schedule_active ON sked_tasks (schedule, id)
    WHERE schedule IS NOT NULL AND state IN ('scheduled', 'available', 'running', 'retrying');
-- A schedule's latest finished run (its last outcome and end), without a walk through the
-- finished tasks of every queue.
CREATE INDEX sked_tasks_schedule_finished ON sked_tasks (schedule, id)
    WHERE schedule IS NOT NULL AND state IN ('succeeded', 'dead', 'cancelled');
