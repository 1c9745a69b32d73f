-- A schedule's dead tasks by occurrence: whether a run (a workflow's tasks share their
-- occurrence) had a task die, for its outcome and for dead runs in a row. Few rows: only
-- dead tasks of schedules.
CREATE INDEX tasks_schedule_dead ON tasks (schedule, nominal_at) WHERE state = 'dead';
