-- Schedules declared in code carry the group that declares them (NULL: made at run time).
ALTER TABLE schedules ADD COLUMN declared_by TEXT;
CREATE INDEX schedules_declared_by ON schedules (declared_by) WHERE declared_by IS NOT NULL;
