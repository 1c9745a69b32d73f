-- sked's tables live in the connection's schema (search_path), every name prefixed `sked_`, so
-- they can share a database (and a transaction) with the application's own tables.

CREATE TABLE sked_tasks (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    priority         integer     NOT NULL,
    state            text        NOT NULL CHECK (state IN
                         ('scheduled', 'available', 'running', 'retrying', 'succeeded', 'dead', 'cancelled')),
    run_at           timestamptz NOT NULL,
    attempt          integer     NOT NULL DEFAULT 0,   -- fencing token of the current lease
    max_attempts     integer     NOT NULL,
    timeout_ms       bigint,
    unique_key       text,
    backoff_base_ms  bigint,
    backoff_max_ms   bigint,
    schedule         text,
    nominal_at       timestamptz,
    created_at       timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    lease_expires_at timestamptz,
    worker           text,
    cancel_requested boolean     NOT NULL DEFAULT false,
    last_error       text,
    result           jsonb
) WITH (
    -- Room on each page so that heartbeats (which touch no indexed column) are HOT updates.
    fillfactor = 85,
    -- Every task is inserted once and updated two or three times: vacuum early and often, so
    -- dead tuples and index bloat stay small under a sustained load.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

-- Claims read only available tasks: future tasks are in none of these, so a backlog of millions
-- of future tasks costs nothing per claim.
CREATE INDEX sked_tasks_available ON sked_tasks (priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX sked_tasks_available_queue ON sked_tasks (queue, priority DESC, run_at, id) WHERE state = 'available';
-- Staging (due scheduled/retrying tasks become available) and "when is the next one due".
CREATE INDEX sked_tasks_waiting ON sked_tasks (run_at) WHERE state IN ('scheduled', 'retrying');
-- Running tasks are few: rescue scans them whole; concurrency limits count them per queue.
CREATE INDEX sked_tasks_running ON sked_tasks (queue) WHERE state = 'running';
-- A unique key is held only by an unfinished task.
CREATE UNIQUE INDEX sked_tasks_unique_key ON sked_tasks (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'available', 'running', 'retrying');
CREATE INDEX sked_tasks_schedule ON sked_tasks (schedule, id) WHERE schedule IS NOT NULL;
-- Retention deletes finished tasks in batches, oldest first.
CREATE INDEX sked_tasks_finished ON sked_tasks (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Attempts that did not end their task (failed and retried, snoozed, rescued). The attempt that
-- ended a task, or is running now, is read from the task row itself.
CREATE TABLE sked_task_attempts (
    task_id     bigint      NOT NULL,
    attempt     integer     NOT NULL,
    worker      text        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text        NOT NULL,
    error       text,
    PRIMARY KEY (task_id, attempt)
);

CREATE TABLE sked_queues (
    name              text PRIMARY KEY,
    paused            boolean     NOT NULL DEFAULT false,
    concurrency_limit integer,
    updated_at        timestamptz NOT NULL
);

CREATE TABLE sked_leases (
    name       text PRIMARY KEY,
    holder     text        NOT NULL,
    token      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE sked_schedules (
    name              text PRIMARY KEY,
    spec              text        NOT NULL,
    tz                text        NOT NULL,
    task              jsonb       NOT NULL, -- the task template
    overlap           text        NOT NULL,
    catchup           text        NOT NULL,
    catchup_window_ms bigint      NOT NULL,
    paused            boolean     NOT NULL DEFAULT false,
    anchor_at         timestamptz NOT NULL,
    next_fire_at      timestamptz,
    buffered_at       timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
CREATE INDEX sked_schedules_next_fire ON sked_schedules (next_fire_at) WHERE NOT paused;

-- The occurrence ledger: one row per schedule and nominal fire time, whatever happened to it.
-- Its primary key is what makes a second task for one occurrence impossible, whatever the
-- leaders do.
CREATE TABLE sked_occurrences (
    schedule    text        NOT NULL,
    nominal_at  timestamptz NOT NULL,
    outcome     text        NOT NULL,
    task_id     bigint,
    detail      text,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, nominal_at)
);
CREATE INDEX sked_occurrences_recorded ON sked_occurrences (recorded_at);
