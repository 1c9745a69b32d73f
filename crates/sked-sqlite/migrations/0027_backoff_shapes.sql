-- A task's backoff of another shape than the exponential one (fixed, linear, a list of
-- delays), as its spec; the exponential shape stays in backoff_base_ms and backoff_max_ms.
ALTER TABLE tasks ADD COLUMN backoff TEXT;
