-- Tasks with the same parents wait together
-- (docs/decisions/0022-tasks-with-the-same-parents-wait-together.md). A wait holds one count
-- of parents not yet counted, what a failed parent does to its tasks and its tasks' ids
-- (written once: every task of a wait is made in the same transaction); each task with
-- parents names its wait. A stage of a workflow (tasks made together with the same parents)
-- is one wait, and a task that waits for a whole stage waits for that wait through one row.
CREATE TABLE sked_waits (
    id           bigserial PRIMARY KEY,
    parents_left integer NOT NULL,
    run_anyway   boolean NOT NULL,
    tasks        bigint[] NOT NULL
);
ALTER TABLE sked_tasks ADD COLUMN wait bigint;
-- A wait's waiting tasks, which a release or a cancel moves. Over waiting tasks only: no
-- update of a task is HOT (`state` is in partial indexes' conditions), so an index over every
-- state would take a new entry at each claim and ending too.
CREATE INDEX sked_tasks_waiting_by_wait ON sked_tasks (wait) WHERE state = 'waiting';
-- A wait waits for a task. `done` says that the parent's end was counted in an earlier life
-- of the parent (it had ended when the wait was made, or ended and was retried by hand).
CREATE TABLE sked_wait_parents (
    parent bigint  NOT NULL,
    wait   bigint  NOT NULL,
    done   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (parent, wait)
);
CREATE INDEX sked_wait_parents_by_wait ON sked_wait_parents (wait);
-- A wait waits for every task of another wait (`stage`): the fan-in after a stage.
CREATE TABLE sked_wait_stages (
    stage bigint NOT NULL,
    wait  bigint NOT NULL,
    PRIMARY KEY (stage, wait)
);
CREATE INDEX sked_wait_stages_by_wait ON sked_wait_stages (wait);
-- A task of a stage whose end a wait counted before the task was retried by hand.
CREATE TABLE sked_wait_counted (
    task bigint NOT NULL,
    wait bigint NOT NULL,
    PRIMARY KEY (task, wait)
);
-- Each task with parents gets a wait of its own, numbered as the task, with its count, its
-- failure rule and its edges.
INSERT INTO sked_waits (id, parents_left, run_anyway, tasks)
    SELECT t.id, t.parents_left, t.on_parent_failure IS NOT DISTINCT FROM 'run', ARRAY[t.id]
      FROM sked_tasks t WHERE t.id IN (SELECT child FROM sked_task_edges);
UPDATE sked_tasks SET wait = id WHERE id IN (SELECT id FROM sked_waits);
SELECT setval(pg_get_serial_sequence('sked_waits', 'id'),
              greatest((SELECT max(id) FROM sked_waits), 1));
INSERT INTO sked_wait_parents (parent, wait, done)
    SELECT parent, child, done FROM sked_task_edges;
DROP TABLE sked_task_edges;

-- sked_enqueue as migration 33 made it, a task with parents in a wait of its own; a parent
-- that expired before it started counts as failed, as the store's inserts count it.
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
    traceparent text DEFAULT NULL,
    depends_on bigint[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel',
    batch bigint DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    ttl interval DEFAULT NULL
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
    parents_ bigint[] := coalesce(sked_enqueue.depends_on, '{}');
    parent_state text;
    left_ integer := 0;
    failed_ bigint;
    failed_state text;
    error_ text;
    finished_ timestamptz;
    batch_state text;
    deadline_ timestamptz;
    wait_ bigint;
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
    IF sked_enqueue.ttl IS NOT NULL THEN
        IF sked_enqueue.expires_at IS NOT NULL THEN
            PERFORM sked_refuse('give ttl or expires_at, not both: each sets the task''s deadline to start');
        END IF;
        IF sked_enqueue.ttl <= interval '0' THEN
            PERFORM sked_refuse('ttl must be positive');
        END IF;
        PERFORM sked_check_duration('ttl', sked_enqueue.ttl);
    END IF;
    -- The parents, as `check_parents` checks them.
    IF cardinality(parents_) > 100000 THEN
        PERFORM sked_refuse(format('depends_on names %s tasks; at most 100000', cardinality(parents_)));
    END IF;
    FOR i IN 1..cardinality(parents_) LOOP
        IF parents_[i] IS NULL OR parents_[i] < 1 THEN
            PERFORM sked_refuse(format('depends_on: %s is not a task id', coalesce(parents_[i]::text, 'null')));
        END IF;
        IF parents_[i] = ANY(parents_[1:i - 1]) THEN
            PERFORM sked_refuse(format('depends_on names task %s twice', parents_[i]));
        END IF;
    END LOOP;
    IF cardinality(parents_) > 0 AND sked_enqueue.debounce IS NOT NULL THEN
        PERFORM sked_refuse('debounce and depends_on do not go together: a debounced task is replaced before it starts, a waiting one keeps its parents');
    END IF;
    IF sked_enqueue.on_parent_failure IS NULL
       OR sked_enqueue.on_parent_failure NOT IN ('cancel', 'run') THEN
        PERFORM sked_refuse(format('unknown on_parent_failure %s: expected cancel or run',
                                   coalesce(to_jsonb(sked_enqueue.on_parent_failure)::text, 'null')));
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
    -- Its deadline to start (`NewTask::deadline`): after its run time and now, or it could
    -- never run.
    deadline_ := coalesce(sked_enqueue.expires_at,
                          coalesce(sked_enqueue.run_at, now_) + sked_enqueue.ttl);
    IF deadline_ IS NOT NULL AND deadline_ <= greatest(coalesce(sked_enqueue.run_at, now_), now_) THEN
        PERFORM sked_refuse(format('the task''s deadline to start (%s) is not after its run time or now (%s): it could never run',
                                   deadline_, greatest(coalesce(sked_enqueue.run_at, now_), now_)));
    END IF;
    until_ := now_ + sked_enqueue.unique_for;

    -- How a task with parents starts (`rules::dependents::at_enqueue`): their rows locked and
    -- flagged in id order, as the store's insert of a child does, so that an ending racing
    -- this one either came first (and is seen) or sees the flag and the edges.
    IF cardinality(parents_) > 0 THEN
        UPDATE sked_tasks t SET has_children = true
          FROM (SELECT s.id FROM sked_tasks s WHERE s.id = ANY(parents_) ORDER BY s.id FOR UPDATE) l
         WHERE t.id = l.id;
        FOR i IN 1..cardinality(parents_) LOOP
            SELECT t.state INTO parent_state FROM sked_tasks t WHERE t.id = parents_[i];
            IF NOT FOUND THEN
                PERFORM sked_refuse(format('depends_on: no task %s', parents_[i]));
            END IF;
            IF parent_state IN ('dead', 'cancelled', 'expired')
               AND (failed_ IS NULL OR parents_[i] < failed_) THEN
                failed_ := parents_[i];
                failed_state := parent_state;
            ELSIF parent_state NOT IN ('succeeded', 'dead', 'cancelled', 'expired') THEN
                left_ := left_ + 1;
            END IF;
        END LOOP;
        IF sked_enqueue.on_parent_failure = 'cancel' AND failed_ IS NOT NULL THEN
            state_ := 'cancelled';
            error_ := CASE failed_state
                WHEN 'cancelled' THEN format('parent %s was cancelled', failed_)
                WHEN 'expired' THEN format('parent %s expired before it started', failed_)
                ELSE format('parent %s ended %s', failed_, failed_state) END;
            finished_ := now_;
        ELSIF left_ > 0 THEN
            state_ := 'waiting';
        END IF;
    END IF;

    IF sked_enqueue.unique_key IS NOT NULL THEN
        -- One enqueue of a key at a time, until commit: a task with a window is not in the
        -- unique index, so the index alone cannot keep two from being made at once.
        PERFORM pg_advisory_xact_lock(
            hashtext('sked_unique_key:' || current_schema() || ':' || sked_enqueue.unique_key));
        -- A task whose dedup window is open holds the key, finished or not.
        SELECT t.id INTO id_ FROM sked_tasks t
         WHERE t.unique_key = sked_enqueue.unique_key AND t.unique_until > now_
         ORDER BY t.id DESC LIMIT 1;
        IF id_ IS NOT NULL THEN
            RETURN id_;
        END IF;
        -- An unfinished task without a window holds it too: the unique index finds that one
        -- for a task without a window, which is in the index, but not for one with a window.
        IF sked_enqueue.unique_for IS NOT NULL THEN
            SELECT t.id INTO id_ FROM sked_tasks t
             WHERE t.unique_key = sked_enqueue.unique_key AND t.unique_until IS NULL
               AND t.state IN ('waiting', 'scheduled', 'available', 'running', 'retrying');
            IF id_ IS NOT NULL THEN
                RETURN id_;
            END IF;
        END IF;
    END IF;
    -- A holder that finishes between the insert and the lookup frees the key: try again.
    FOR attempt_ IN 1..5 LOOP
        INSERT INTO sked_tasks AS t (queue, kind, payload, priority, state, run_at, max_attempts,
                timeout_ms, backoff_base_ms, backoff_max_ms, concurrency_key, traceparent,
                created_at, unique_key, unique_until, last_error, finished_at, expires_at)
        VALUES (sked_enqueue.queue, sked_enqueue.kind, payload_, sked_enqueue.priority, state_,
                at_, sked_enqueue.max_attempts, sked_ms(sked_enqueue.timeout),
                sked_ms(sked_enqueue.backoff_base), sked_ms(sked_enqueue.backoff_max),
                sked_enqueue.key, sked_enqueue.traceparent, now_, sked_enqueue.unique_key,
                until_, error_, finished_, deadline_)
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_until IS NULL
            AND state IN ('waiting', 'scheduled', 'available', 'running', 'retrying') DO NOTHING
        RETURNING t.id INTO id_;
        IF id_ IS NOT NULL THEN
            -- A task with parents waits in a wait of its own, with an edge to each parent.
            IF cardinality(parents_) > 0 THEN
                INSERT INTO sked_waits (parents_left, run_anyway, tasks)
                VALUES (left_, sked_enqueue.on_parent_failure = 'run', ARRAY[id_])
                RETURNING id INTO wait_;
                UPDATE sked_tasks t SET wait = wait_ WHERE t.id = id_;
                INSERT INTO sked_wait_parents (parent, wait, done)
                SELECT p.id, wait_, p.state IN ('succeeded', 'dead', 'cancelled', 'expired')
                  FROM sked_tasks p WHERE p.id = ANY(parents_);
            END IF;
            IF sked_enqueue.batch IS NOT NULL THEN
                -- The batch it joins, locked after the parents as the store's joins lock it: a
                -- batch that has ended takes no more tasks (a duplicate joins nothing). A closed
                -- batch has an unfinished task until it ends, so a join never ends it.
                SELECT b.state INTO batch_state FROM sked_batches b
                 WHERE b.id = sked_enqueue.batch FOR UPDATE;
                IF NOT FOUND THEN
                    PERFORM sked_refuse(format('batch: no batch %s', sked_enqueue.batch));
                END IF;
                IF batch_state = 'done' THEN
                    PERFORM sked_refuse(format('batch %s has ended: its callbacks were enqueued, and it takes no more tasks',
                                               sked_enqueue.batch));
                END IF;
                -- Its end is counted in the batch: flagged, so that endings take that path.
                INSERT INTO sked_batch_tasks (task, batch, open)
                VALUES (id_, sked_enqueue.batch, state_ <> 'cancelled');
                UPDATE sked_batches b SET size = b.size + 1 WHERE b.id = sked_enqueue.batch;
                UPDATE sked_tasks t SET has_children = true WHERE t.id = id_;
            END IF;
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
             WHERE t.unique_key = sked_enqueue.unique_key AND t.unique_until IS NULL
               AND t.state IN ('scheduled', 'available') AND t.attempt = 0
            RETURNING t.id INTO id_;
            IF id_ IS NOT NULL THEN
                RETURN id_;
            END IF;
        END IF;
        SELECT t.id INTO id_ FROM sked_tasks t
         WHERE t.unique_key = sked_enqueue.unique_key AND t.unique_until IS NULL
           AND t.state IN ('waiting', 'scheduled', 'available', 'running', 'retrying');
        IF id_ IS NOT NULL THEN
            RETURN id_;
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = 'sked: the unique key kept changing hands; try again';
END $$;

ALTER TABLE sked_tasks DROP COLUMN parents_left, DROP COLUMN on_parent_failure;
