-- Tasks that wait for other tasks (docs/decisions/0012-tasks-that-wait-for-tasks.md). A task
-- with a parent that has not succeeded is 'waiting'; `parents_left` counts those parents;
-- `has_children` tells an ending to look for tasks waiting on the one it ends.
ALTER TABLE sked_tasks DROP CONSTRAINT sked_tasks_state_check;
ALTER TABLE sked_tasks ADD CONSTRAINT sked_tasks_state_check CHECK (state IN
    ('waiting', 'scheduled', 'available', 'running', 'retrying', 'succeeded', 'dead', 'cancelled'));
ALTER TABLE sked_tasks
    ADD COLUMN parents_left integer NOT NULL DEFAULT 0,
    ADD COLUMN has_children boolean NOT NULL DEFAULT false,
    ADD COLUMN on_parent_failure text;
-- Each dependency; `done` once the parent's end has been counted.
CREATE TABLE sked_task_edges (
    child  bigint  NOT NULL,
    parent bigint  NOT NULL,
    done   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (child, parent)
);
CREATE INDEX sked_task_edges_parent ON sked_task_edges (parent, child);
-- 'waiting' is unfinished: the indexes over the unfinished states take it in.
DROP INDEX sked_tasks_unique_key;
CREATE UNIQUE INDEX sked_tasks_unique_key ON sked_tasks (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying');
DROP INDEX sked_tasks_schedule_active;
CREATE INDEX sked_tasks_schedule_active ON sked_tasks (schedule, id)
    WHERE schedule IS NOT NULL AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying');
-- Waiting tasks by queue, for the queue counts.
CREATE INDEX sked_tasks_waiting_for_parents ON sked_tasks (queue) WHERE state = 'waiting';

-- sked_enqueue as migration 18 made it, its unique key held by a waiting task too.
CREATE OR REPLACE FUNCTION sked_enqueue(
    kind text,
    payload jsonb DEFAULT 'null',
    queue text DEFAULT 'default',
    priority integer DEFAULT 0,
    run_at timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    timeout interval DEFAULT NULL,
    unique_key text DEFAULT NULL,
    unique_for interval DEFAULT NULL,
    debounce interval DEFAULT NULL,
    key text DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_max interval DEFAULT NULL,
    traceparent text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    -- The database's clock, as every node's decisions use.
    now_ timestamptz := clock_timestamp();
    at_ timestamptz;
    state_ text;
    until_ timestamptz;
    id_ bigint;
    channel text := 'sked_' || current_schema();
    payload_ jsonb := coalesce(sked_enqueue.payload, 'null');
BEGIN
    -- The checks of `NewTask::validate`, in its order.
    PERFORM sked_check_name('kind', sked_enqueue.kind);
    PERFORM sked_check_name('queue', sked_enqueue.queue);
    PERFORM sked_check_builtin_payload(sked_enqueue.kind, payload_);
    IF sked_enqueue.max_attempts IS NULL OR sked_enqueue.max_attempts < 1 THEN
        PERFORM sked_refuse(format('max_attempts must be at least 1, got %s',
                                   coalesce(sked_enqueue.max_attempts::text, 'null')));
    END IF;
    IF sked_enqueue.priority IS NULL THEN
        PERFORM sked_refuse('priority must be a number');
    END IF;
    IF sked_enqueue.timeout IS NOT NULL THEN
        IF sked_enqueue.timeout <= interval '0' THEN
            PERFORM sked_refuse('timeout must be positive');
        END IF;
        PERFORM sked_check_duration('timeout', sked_enqueue.timeout);
    END IF;
    IF sked_enqueue.unique_key IS NOT NULL
       AND char_length(sked_enqueue.unique_key) NOT BETWEEN 1 AND 512 THEN
        PERFORM sked_refuse('unique_key must be 1 to 512 characters long');
    END IF;
    IF sked_enqueue.key IS NOT NULL AND char_length(sked_enqueue.key) NOT BETWEEN 1 AND 512 THEN
        PERFORM sked_refuse('key must be 1 to 512 characters long');
    END IF;
    IF sked_enqueue.traceparent IS NOT NULL AND (
           sked_enqueue.traceparent !~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
           OR sked_enqueue.traceparent ~ '^00-0{32}-' OR sked_enqueue.traceparent ~ '-0{16}-') THEN
        PERFORM sked_refuse(format('traceparent must look like 00-<32 hex digits>-<16 hex digits>-<2 hex digits> (W3C Trace Context), got %s',
                                   to_jsonb(left(sked_enqueue.traceparent, 80))));
    END IF;
    IF sked_enqueue.unique_for IS NOT NULL THEN
        IF sked_enqueue.unique_key IS NULL THEN
            PERFORM sked_refuse('unique_for needs a unique_key');
        END IF;
        IF sked_enqueue.unique_for <= interval '0' THEN
            PERFORM sked_refuse('unique_for must be positive');
        END IF;
        PERFORM sked_check_duration('unique_for', sked_enqueue.unique_for);
    END IF;
    IF sked_enqueue.debounce IS NOT NULL THEN
        IF sked_enqueue.unique_key IS NULL THEN
            PERFORM sked_refuse('debounce needs a unique_key');
        END IF;
        IF sked_enqueue.debounce <= interval '0' THEN
            PERFORM sked_refuse('debounce must be positive');
        END IF;
        PERFORM sked_check_duration('debounce', sked_enqueue.debounce);
    END IF;
    IF sked_enqueue.unique_for IS NOT NULL AND sked_enqueue.debounce IS NOT NULL THEN
        PERFORM sked_refuse('unique_for and debounce do not go together: a debounced key is held until its task starts');
    END IF;
    IF (sked_enqueue.backoff_base IS NULL) <> (sked_enqueue.backoff_max IS NULL) THEN
        PERFORM sked_refuse('backoff needs both backoff_base and backoff_max');
    END IF;
    IF sked_enqueue.backoff_base IS NOT NULL THEN
        IF sked_enqueue.backoff_base <= interval '0'
           OR sked_enqueue.backoff_max < sked_enqueue.backoff_base THEN
            PERFORM sked_refuse('backoff needs base > 0 and max >= base');
        END IF;
        PERFORM sked_check_duration('backoff max', sked_enqueue.backoff_max);
    END IF;
    -- The size of PostgreSQL's text of the payload, which spaces its separators: a payload
    -- near the limit may be refused here that the API, counting compact JSON, would take.
    IF octet_length(payload_::text) > 1048576 THEN
        PERFORM sked_refuse(format('payload is %s bytes; the limit is 1048576 bytes',
                                   octet_length(payload_::text)));
    END IF;

    -- A debounced task runs once its key has been quiet this long, and not before its run_at.
    at_ := CASE WHEN sked_enqueue.debounce IS NULL THEN coalesce(sked_enqueue.run_at, now_)
                ELSE greatest(sked_enqueue.run_at, now_ + sked_enqueue.debounce) END;
    state_ := CASE WHEN at_ <= now_ THEN 'available' ELSE 'scheduled' END;
    until_ := now_ + sked_enqueue.unique_for;

    IF sked_enqueue.unique_key IS NOT NULL THEN
        -- A task whose dedup window is open holds the key, finished or not.
        SELECT t.id INTO id_ FROM sked_tasks t
         WHERE t.unique_key = sked_enqueue.unique_key AND t.unique_until > now_
         ORDER BY t.id DESC LIMIT 1;
        IF id_ IS NOT NULL THEN
            RETURN id_;
        END IF;
    END IF;
    -- A holder that finishes between the insert and the lookup frees the key: try again.
    FOR attempt_ IN 1..5 LOOP
        INSERT INTO sked_tasks AS t (queue, kind, payload, priority, state, run_at, max_attempts,
                timeout_ms, backoff_base_ms, backoff_max_ms, concurrency_key, traceparent,
                created_at, unique_key, unique_until)
        VALUES (sked_enqueue.queue, sked_enqueue.kind, payload_, sked_enqueue.priority, state_,
                at_, sked_enqueue.max_attempts, sked_ms(sked_enqueue.timeout),
                sked_ms(sked_enqueue.backoff_base), sked_ms(sked_enqueue.backoff_max),
                sked_enqueue.key, sked_enqueue.traceparent, now_, sked_enqueue.unique_key,
                until_)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL
            AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying') DO NOTHING
        RETURNING t.id INTO id_;
        IF id_ IS NOT NULL THEN
            -- Heard by the nodes at commit: the first position of the task in claim order, and
            -- when it is due if it waits (the format `listen::notify_tasks_sql` writes).
            PERFORM pg_notify(channel,
                't' || (extract(epoch FROM at_) * 1000000)::bigint::text
                || 'p' || sked_enqueue.priority::text
                || CASE WHEN state_ <> 'available'
                        THEN 'w' || (extract(epoch FROM at_) * 1000000)::bigint::text
                        ELSE '' END);
            RETURN id_;
        END IF;
        -- Debounced: a holder that has not started takes this task's payload and run time.
        IF sked_enqueue.debounce IS NOT NULL THEN
            UPDATE sked_tasks t SET payload = payload_, run_at = at_, state = state_
             WHERE t.unique_key = sked_enqueue.unique_key
               AND t.state IN ('scheduled', 'available') AND t.attempt = 0
            RETURNING t.id INTO id_;
            IF id_ IS NOT NULL THEN
                RETURN id_;
            END IF;
        END IF;
        SELECT t.id INTO id_ FROM sked_tasks t
         WHERE t.unique_key = sked_enqueue.unique_key
           AND t.state IN ('waiting', 'scheduled', 'available', 'running', 'retrying');
        IF id_ IS NOT NULL THEN
            RETURN id_;
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = 'sked: the unique key kept changing hands; try again';
END $$;
