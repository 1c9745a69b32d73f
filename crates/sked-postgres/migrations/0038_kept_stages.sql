-- A large stage of a workflow kept as one row until it is released
-- (docs/decisions/0023-tasks-made-when-released.md). Its tasks share every column but the
-- payload and all start waiting for the same wait; their ids are taken when the stage is
-- made, and their rows are made by sked_make_stage_rows, by the release (available or
-- scheduled), the wait's cancel (cancelled), or anything else that touches one (waiting).
CREATE TABLE sked_stages (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    wait            bigint      NOT NULL,
    workflow        bigint,
    -- Its tasks' ids, ascending, and the range they span (other tasks may lie in it).
    ids             bigint[]    NOT NULL,
    span            int8range   NOT NULL,
    payloads        jsonb[]     NOT NULL,
    queue           text        NOT NULL,
    kind            text        NOT NULL,
    priority        integer     NOT NULL,
    run_at          timestamptz NOT NULL,
    max_attempts    integer     NOT NULL,
    timeout_ms      bigint,
    backoff_base_ms bigint,
    backoff_max_ms  bigint,
    backoff         text,
    has_children    boolean     NOT NULL,
    created_at      timestamptz NOT NULL
);
-- Written once in the making's transaction: out of line, uncompressed (see migration 37).
ALTER TABLE sked_stages ALTER COLUMN ids SET STORAGE EXTERNAL,
                        ALTER COLUMN payloads SET STORAGE EXTERNAL;
CREATE INDEX sked_stages_by_wait ON sked_stages (wait);
CREATE INDEX sked_stages_by_span ON sked_stages USING gist (span);

-- Makes the rows of kept stages, deleting the stages' rows, and answers each task made:
-- waiting, those of the stages that hold any of the tasks `ids_` (with `family`, also those
-- of their parents and children), of the workflows `workflows_`, or, with `every`, all; those
-- of the waits `released`, available or scheduled, each by its run time against `now_`;
-- those of the waits `cancelled`, cancelled at `now_` with the reason at the same place in
-- `errors`.
CREATE FUNCTION sked_make_stage_rows(
    ids_ bigint[],
    family boolean,
    workflows_ bigint[],
    every boolean,
    released bigint[],
    cancelled bigint[],
    errors text[],
    now_ timestamptz
) RETURNS TABLE (id bigint, state text, run_at timestamptz, priority integer, wait bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH own AS (
        -- The waits of the tasks `ids_`, rows or kept.
        SELECT t.wait FROM sked_tasks t WHERE family AND t.id = ANY (ids_) AND t.wait IS NOT NULL
        UNION SELECT s.wait FROM sked_stages s
         WHERE family AND s.span @> ANY (ids_) AND s.ids && ids_),
    related AS (
        -- Their children's waits, and the stages their own waits wait for whole.
        SELECT p.wait FROM sked_wait_parents p WHERE family AND p.parent = ANY (ids_)
        UNION SELECT ws.wait FROM sked_wait_stages ws WHERE ws.stage IN (SELECT wait FROM own)
        UNION SELECT ws.stage FROM sked_wait_stages ws WHERE ws.wait IN (SELECT wait FROM own)),
    gone AS (
        DELETE FROM sked_stages s
         WHERE every
            OR (s.span @> ANY (ids_) AND s.ids && ids_)
            OR s.wait IN (SELECT wait FROM related)
            OR s.workflow = ANY (workflows_)
            OR s.wait = ANY (released)
            OR s.wait = ANY (cancelled)
        RETURNING s.*),
    made AS (
        INSERT INTO sked_tasks (id, queue, kind, payload, priority, state, run_at,
                                max_attempts, timeout_ms, backoff_base_ms, backoff_max_ms,
                                backoff, has_children, wait, workflow, created_at,
                                last_error, finished_at)
        OVERRIDING SYSTEM VALUE
        SELECT u.id, g.queue, g.kind, u.payload, g.priority,
               CASE WHEN e.error IS NOT NULL THEN 'cancelled'
                    WHEN g.wait = ANY (released) AND g.run_at <= now_ THEN 'available'
                    WHEN g.wait = ANY (released) THEN 'scheduled'
                    ELSE 'waiting' END,
               g.run_at, g.max_attempts, g.timeout_ms, g.backoff_base_ms, g.backoff_max_ms,
               g.backoff, g.has_children, g.wait, g.workflow, g.created_at,
               e.error, CASE WHEN e.error IS NOT NULL THEN now_ END
          FROM gone g
         CROSS JOIN LATERAL unnest(g.ids, g.payloads) AS u(id, payload)
          LEFT JOIN unnest(cancelled, errors) AS e(wait, error) ON e.wait = g.wait
        RETURNING sked_tasks.id, sked_tasks.state, sked_tasks.run_at, sked_tasks.priority,
                  sked_tasks.wait)
    SELECT * FROM made
$$;

-- sked_enqueue as migration 36 made it, a parent in a kept stage made a row first.
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
        -- A parent in a kept stage is made a row first, as every touch makes it.
        PERFORM sked_make_stage_rows(parents_, false, NULL, false, NULL, NULL, NULL, now_);
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
