-- A task's backoff of another shape than the exponential one (fixed, linear, a list of
-- delays), as its spec; the exponential shape stays in backoff_base_ms and backoff_max_ms,
-- which sked_enqueue writes.
ALTER TABLE sked_tasks ADD COLUMN backoff text;
