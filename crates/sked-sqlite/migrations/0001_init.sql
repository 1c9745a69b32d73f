-- Times are integer microseconds since the Unix epoch (UTC).

CREATE TABLE tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused, even after pruning
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,                  -- JSON
    priority         INTEGER NOT NULL,
    state            TEXT    NOT NULL,
    run_at           INTEGER NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,        -- fencing token of the current lease
    max_attempts     INTEGER NOT NULL,
    timeout_ms       INTEGER,
    unique_key       TEXT,
    backoff_base_ms  INTEGER,
    backoff_max_ms   INTEGER,
    schedule         TEXT,
    nominal_at       INTEGER,
    created_at       INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    lease_expires_at INTEGER,
    worker           TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT,
    result           TEXT
);

-- Claims read only available tasks: future tasks cost nothing per claim.
CREATE INDEX tasks_available ON tasks (priority DESC, run_at, id) WHERE state = 'available';
CREATE INDEX tasks_available_queue ON tasks (queue, priority DESC, run_at, id) WHERE state = 'available';
-- Staging and the worker's "when is the next task due" look here.
CREATE INDEX tasks_waiting ON tasks (run_at) WHERE state IN ('scheduled', 'retrying');
-- Running tasks are few (bounded by workers' concurrency): one small index serves both rescue
-- (scanned whole) and the running counts per queue for concurrency limits.
CREATE INDEX tasks_running ON tasks (queue) WHERE state = 'running';
-- A unique key is held only by an unfinished task.
CREATE UNIQUE INDEX tasks_unique_key ON tasks (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'available', 'running', 'retrying');
CREATE INDEX tasks_schedule ON tasks (schedule, id) WHERE schedule IS NOT NULL;
CREATE INDEX tasks_schedule_active ON tasks (schedule, id)
    WHERE schedule IS NOT NULL AND state IN ('scheduled', 'available', 'running', 'retrying');
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE state IN ('succeeded', 'dead', 'cancelled');

-- Attempts that did not end their task (failed and retried, snoozed, rescued). The attempt that
-- ended a task, or is running now, is read from the task row itself.
CREATE TABLE task_attempts (
    task_id     INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    outcome     TEXT    NOT NULL,
    error       TEXT,
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;

CREATE TABLE queues (
    name              TEXT PRIMARY KEY,
    paused            INTEGER NOT NULL DEFAULT 0,
    concurrency_limit INTEGER,
    updated_at        INTEGER NOT NULL
);

CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT    NOT NULL,
    token      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE schedules (
    name              TEXT PRIMARY KEY,
    spec              TEXT    NOT NULL,
    tz                TEXT    NOT NULL,
    task              TEXT    NOT NULL, -- JSON task template
    overlap           TEXT    NOT NULL,
    catchup           TEXT    NOT NULL,
    catchup_window_ms INTEGER NOT NULL,
    paused            INTEGER NOT NULL DEFAULT 0,
    anchor_at         INTEGER NOT NULL,
    next_fire_at      INTEGER,
    buffered_at       INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX schedules_next_fire ON schedules (next_fire_at) WHERE paused = 0;

-- The occurrence ledger: one row per schedule and nominal fire time, whatever happened to it.
CREATE TABLE occurrences (
    schedule    TEXT    NOT NULL,
    nominal_at  INTEGER NOT NULL,
    outcome     TEXT    NOT NULL,
    task_id     INTEGER,
    detail      TEXT,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (schedule, nominal_at)
) WITHOUT ROWID;
CREATE INDEX occurrences_recorded ON occurrences (recorded_at);
