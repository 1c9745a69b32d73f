-- Schedules declared in code carry the group that declares them (NULL: made at run time).
ALTER TABLE sked_schedules ADD COLUMN declared_by text;
CREATE INDEX sked_schedules_declared_by ON sked_schedules (declared_by) WHERE declared_by IS NOT NULL;
