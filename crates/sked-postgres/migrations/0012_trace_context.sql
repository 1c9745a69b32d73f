-- The W3C trace context (`traceparent`) a task continues: its claim and runs are spans of that
-- trace, and its executors pass it on. Null for tasks enqueued outside any trace.
ALTER TABLE sked_tasks ADD COLUMN traceparent text;
