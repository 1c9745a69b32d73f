-- The paused schedules by name: a list of the few paused among a million reads only them.
CREATE INDEX sked_schedules_paused ON sked_schedules ((name COLLATE "C")) WHERE paused;
