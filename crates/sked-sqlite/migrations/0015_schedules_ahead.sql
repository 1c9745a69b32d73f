-- Schedules are planned ahead of their occurrences. `look_at` is when a schedule needs planning
-- next (NULL: never, as while paused); `awaits_run` says that an outcome waits for one of its
-- runs to end, so that a run's end has it planned at once.
ALTER TABLE schedules ADD COLUMN look_at INTEGER;
ALTER TABLE schedules ADD COLUMN awaits_run INTEGER NOT NULL DEFAULT 0;
UPDATE schedules SET look_at = CASE WHEN buffered_at IS NOT NULL THEN updated_at ELSE next_fire_at END
    WHERE paused = 0;
CREATE INDEX schedules_look ON schedules (look_at) WHERE look_at IS NOT NULL;
