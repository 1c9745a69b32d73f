-- Enqueue from any language, inside the caller's own transaction: the task exists if and only
-- if that transaction commits, and workers hear of it at commit (a NOTIFY is delivered then).
--
--   SELECT sked_enqueue('email.send', '{"to": "a@example.com"}', queue => 'mail');
--   SELECT * FROM sked_enqueue_many('[{"kind": "a"}, {"kind": "b", "run_at": "…"}]');
--
-- The rules are the API's (sked-core's `NewTask::validate`, the store's unique keys and
-- debounce), written again in SQL; a test gives both the same inputs and checks they agree.
-- A refusal raises SQLSTATE 22023 (invalid_parameter_value) with a message that names the
-- problem. The functions run with the search path they were created with, so they find sked's
-- tables (and announce on sked's channel) whatever the caller's search path is.

-- A refusal: 'sked: ' and what is wrong.
CREATE FUNCTION sked_refuse(message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = 'sked: ' || message;
END $$;

-- Names of kinds and queues: 1 to 128 characters, none of them whitespace, '/' or a control
-- character (Rust's `char::is_whitespace` and `is_control`, listed by code point).
CREATE FUNCTION sked_check_name(what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF name IS NULL OR char_length(name) NOT BETWEEN 1 AND 128 THEN
        PERFORM sked_refuse(what || ' must be 1 to 128 characters long');
    END IF;
    IF name ~ '[\x01-\x20\x7f-\x9f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000/]' THEN
        PERFORM sked_refuse(format('%s %s contains whitespace, ''/'' or a control character',
                                   what, to_jsonb(name)));
    END IF;
END $$;

-- A duration given as `what`: not negative, at most ten years (`MAX_DURATION`).
CREATE FUNCTION sked_check_duration(what text, d interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF d < interval '0' THEN
        PERFORM sked_refuse(what || ' must not be negative');
    END IF;
    IF d > interval '3650 days' THEN
        PERFORM sked_refuse(what || ' is longer than the limit of 3650d');
    END IF;
END $$;

-- Milliseconds, as the table keeps durations.
CREATE FUNCTION sked_ms(d interval) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM d) * 1000)::bigint $$;

-- The first key of `payload` that is not one of `known`, if any.
CREATE FUNCTION sked_unknown_key(payload jsonb, known text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT k FROM jsonb_object_keys(payload) k WHERE k <> ALL (known) ORDER BY k LIMIT 1
$$;

-- The payloads of the built-in kinds `shell` and `http` (sked-core's `ShellPayload` and
-- `HttpPayload`); other kinds' payloads are their handlers' business.
CREATE FUNCTION sked_check_builtin_payload(kind text, payload jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    extra text;
    has_command boolean;
    has_argv boolean;
    url text;
    rest text;
BEGIN
    IF kind = 'shell' THEN
        IF jsonb_typeof(payload) IS DISTINCT FROM 'object' THEN
            PERFORM sked_refuse('invalid shell payload: expected an object with "command" or "argv"');
        END IF;
        extra := sked_unknown_key(payload, ARRAY['command', 'argv', 'env', 'cwd']);
        IF extra IS NOT NULL THEN
            PERFORM sked_refuse(format('invalid shell payload: unknown field `%s`, expected one of `command`, `argv`, `env`, `cwd`', extra));
        END IF;
        IF jsonb_typeof(payload -> 'command') NOT IN ('string', 'null')
           OR jsonb_typeof(payload -> 'cwd') NOT IN ('string', 'null') THEN
            PERFORM sked_refuse('invalid shell payload: "command" and "cwd" are strings');
        END IF;
        IF payload ? 'argv' AND jsonb_typeof(payload -> 'argv') <> 'null' AND (
               jsonb_typeof(payload -> 'argv') <> 'array'
               OR EXISTS (SELECT 1 FROM jsonb_array_elements(payload -> 'argv') a
                          WHERE jsonb_typeof(a) <> 'string')) THEN
            PERFORM sked_refuse('invalid shell payload: "argv" is an array of strings');
        END IF;
        IF payload ? 'env' AND (
               jsonb_typeof(payload -> 'env') <> 'object'
               OR EXISTS (SELECT 1 FROM jsonb_each(payload -> 'env') e
                          WHERE jsonb_typeof(e.value) <> 'string')) THEN
            PERFORM sked_refuse('invalid shell payload: "env" is an object of strings');
        END IF;
        has_command := coalesce(jsonb_typeof(payload -> 'command') = 'string', false);
        has_argv := coalesce(jsonb_typeof(payload -> 'argv') = 'array', false);
        IF has_command = has_argv OR (has_argv AND jsonb_array_length(payload -> 'argv') = 0) THEN
            PERFORM sked_refuse('invalid shell payload: it needs exactly one of "command" or a non-empty "argv"');
        END IF;
    ELSIF kind = 'http' THEN
        IF jsonb_typeof(payload) IS DISTINCT FROM 'object' THEN
            PERFORM sked_refuse('invalid http payload: expected an object with "url"');
        END IF;
        extra := sked_unknown_key(payload, ARRAY['method', 'url', 'headers', 'body', 'follow_redirects']);
        IF extra IS NOT NULL THEN
            PERFORM sked_refuse(format('invalid http payload: unknown field `%s`, expected one of `method`, `url`, `headers`, `body`, `follow_redirects`', extra));
        END IF;
        IF jsonb_typeof(payload -> 'url') IS DISTINCT FROM 'string' THEN
            PERFORM sked_refuse('invalid http payload: missing field `url` (a string)');
        END IF;
        IF payload ? 'method' AND (jsonb_typeof(payload -> 'method') <> 'string'
               OR payload ->> 'method' !~ '^[!#$%&''*+.^_`|~0-9A-Za-z-]+$') THEN
            PERFORM sked_refuse(format('invalid http payload: method %s is not an HTTP method',
                                       payload -> 'method'));
        END IF;
        IF payload ? 'headers' AND (
               jsonb_typeof(payload -> 'headers') <> 'object'
               OR EXISTS (SELECT 1 FROM jsonb_each(payload -> 'headers') h
                          WHERE jsonb_typeof(h.value) <> 'string')) THEN
            PERFORM sked_refuse('invalid http payload: "headers" is an object of strings');
        END IF;
        IF payload ? 'follow_redirects' AND jsonb_typeof(payload -> 'follow_redirects') <> 'boolean' THEN
            PERFORM sked_refuse('invalid http payload: "follow_redirects" is true or false');
        END IF;
        url := payload ->> 'url';
        rest := substring(url FROM '^(?:[Hh][Tt][Tt][Pp][Ss]?)://(.*)$');
        IF rest IS NULL THEN
            PERFORM sked_refuse(format('invalid http payload: url %s: its scheme is not http or https',
                                       to_jsonb(url)));
        END IF;
        IF split_part(split_part(split_part(rest, '/', 1), '?', 1), '#', 1) = '' THEN
            PERFORM sked_refuse(format('invalid http payload: url %s names no host', to_jsonb(url)));
        END IF;
    END IF;
END $$;

-- Enqueues one task and returns its id: the id of the task already holding `unique_key` when
-- the key is held (or of the waiting task that took this payload, under `debounce`).
CREATE FUNCTION sked_enqueue(
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
            AND state IN ('scheduled', 'available', 'running', 'retrying') DO NOTHING
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
           AND t.state IN ('scheduled', 'available', 'running', 'retrying');
        IF id_ IS NOT NULL THEN
            RETURN id_;
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = 'sked: the unique key kept changing hands; try again';
END $$;

-- Enqueues many tasks, given as a JSON array of objects in the API's shape (`POST /v1/tasks`:
-- kind, payload, queue, priority, run_at, max_attempts, timeout, unique_key, unique_for,
-- debounce, key, backoff {base, max}, traceparent; durations as text PostgreSQL reads as an
-- interval, like "30s", "5 min" or "PT1H"), in order; their ids, in that order. All or none:
-- a refusal names the task by its place in the array (from 0).
CREATE FUNCTION sked_enqueue_many(tasks jsonb) RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    t jsonb;
    i bigint;
    extra text;
    known text[] := ARRAY['kind', 'payload', 'queue', 'priority', 'run_at', 'max_attempts',
        'timeout', 'unique_key', 'unique_for', 'debounce', 'key', 'backoff', 'traceparent'];
BEGIN
    IF jsonb_typeof(tasks) IS DISTINCT FROM 'array' THEN
        PERFORM sked_refuse('sked_enqueue_many takes a JSON array of tasks');
    END IF;
    FOR t, i IN SELECT e, n - 1 FROM jsonb_array_elements(tasks) WITH ORDINALITY AS x(e, n) LOOP
        BEGIN
            IF jsonb_typeof(t) <> 'object' THEN
                PERFORM sked_refuse('a task is a JSON object');
            END IF;
            extra := sked_unknown_key(t, known);
            IF extra IS NOT NULL THEN
                PERFORM sked_refuse(format('unknown field `%s`', extra));
            END IF;
            extra := sked_unknown_key(coalesce(t -> 'backoff', '{}'), ARRAY['base', 'max']);
            IF extra IS NOT NULL THEN
                PERFORM sked_refuse(format('unknown field `%s` in backoff', extra));
            END IF;
            RETURN NEXT sked_enqueue(
                kind => t ->> 'kind',
                payload => coalesce(t -> 'payload', 'null'),
                queue => coalesce(t ->> 'queue', 'default'),
                priority => coalesce((t ->> 'priority')::integer, 0),
                run_at => (t ->> 'run_at')::timestamptz,
                max_attempts => coalesce((t ->> 'max_attempts')::integer, 25),
                timeout => (t ->> 'timeout')::interval,
                unique_key => t ->> 'unique_key',
                unique_for => (t ->> 'unique_for')::interval,
                debounce => (t ->> 'debounce')::interval,
                key => t ->> 'key',
                backoff_base => (t -> 'backoff' ->> 'base')::interval,
                backoff_max => (t -> 'backoff' ->> 'max')::interval,
                traceparent => t ->> 'traceparent');
        EXCEPTION WHEN invalid_parameter_value OR invalid_text_representation
                    OR invalid_datetime_format OR datetime_field_overflow
                    OR numeric_value_out_of_range OR interval_field_overflow THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('sked: task %s: %s', i, regexp_replace(SQLERRM, '^sked: ', ''));
        END;
    END LOOP;
END $$;
