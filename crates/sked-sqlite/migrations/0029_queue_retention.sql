-- How long a queue keeps its ended tasks, by the state they ended in (milliseconds; null:
-- the server's retention).
ALTER TABLE queues ADD COLUMN retention_succeeded_ms INTEGER;
ALTER TABLE queues ADD COLUMN retention_dead_ms INTEGER;
ALTER TABLE queues ADD COLUMN retention_cancelled_ms INTEGER;
ALTER TABLE queues ADD COLUMN retention_expired_ms INTEGER;
