-- The paused schedules by name: a list of the few paused among a million reads only them.
CREATE INDEX schedules_paused ON schedules (name) WHERE paused;
