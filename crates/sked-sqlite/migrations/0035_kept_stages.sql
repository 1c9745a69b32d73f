-- A workflow's large stage kept until it is released, in parts that claims take
-- (docs/decisions/0027-kept-stages-on-sqlite.md). A stage that qualifies (its tasks all wait
-- for one wait and share every column but the payload) goes in as parts of at most a claim's
-- size. A part holds the tasks `id` to `id + size - 1`: its ids are taken from the tasks'
-- sequence when it is made, and never given to another task. The first `taken` of them are
-- rows already (claims took them); the rest are the part's. `payloads` is their payloads, in id
-- order, as one JSON array of their exact texts.
-- `released`: its wait was released while it was due and its queue had no limit: its tasks
-- are available, and claims take them from the part. `claimable`: made by a store whose claims
-- take parts; otherwise the release makes the part's rows.
CREATE TABLE stages (
    id           INTEGER PRIMARY KEY,
    wait         INTEGER NOT NULL,
    size         INTEGER NOT NULL,
    taken        INTEGER NOT NULL DEFAULT 0,
    released     INTEGER NOT NULL DEFAULT 0,
    claimable    INTEGER NOT NULL,
    payloads     TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    priority     INTEGER NOT NULL,
    run_at       INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX stages_by_wait ON stages (wait);
