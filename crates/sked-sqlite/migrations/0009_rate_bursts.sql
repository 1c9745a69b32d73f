-- A rate limit's burst: a window may hold rate_limit + rate_burst starts, while a token bucket
-- of that size, refilled at rate_limit per rate_period_ms, keeps the long-run rate. The bucket
-- is the instant it is full again (microseconds; null: full); queues without a burst keep none.
ALTER TABLE queues ADD COLUMN rate_burst INTEGER;
ALTER TABLE queues ADD COLUMN rate_bucket_at INTEGER;
