-- A queue's default backoff, as its spec (`fixed:30s`): the retries of its tasks without a
-- backoff of their own wait as it says.
ALTER TABLE sked_queues ADD COLUMN backoff text;
