-- Claims over every queue read one index in claim order again. Migration 6 left only the
-- per-queue index and merged each queue's first tasks, which reads up to queues × batch index
-- entries for one claim: with 10 queues and batches of 1,000, 10 times the entries (and 20
-- times the time) of one ordered walk, and more with every queue added. The queue is the
-- last column, so that a claim that leaves paused or limited queues out reads the index alone.
CREATE INDEX tasks_available ON tasks (priority DESC, run_at, id, queue) WHERE state = 'available';
