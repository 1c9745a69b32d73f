-- How long a queue keeps its ended tasks, by the state they ended in (milliseconds; null:
-- the server's retention).
ALTER TABLE sked_queues
    ADD COLUMN retention_succeeded_ms bigint,
    ADD COLUMN retention_dead_ms bigint,
    ADD COLUMN retention_cancelled_ms bigint,
    ADD COLUMN retention_expired_ms bigint;
