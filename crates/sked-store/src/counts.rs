//! The statement both SQL backends use for queue counts per state, bounded whatever the
//! number of tasks kept.
//!
//! Every state lives in a partial index that leads with the queue (migration 4 adds the two
//! for timed and finished tasks, a later one the one for tasks waiting for parents): distinct queues are found by skipping through each of them
//! (one probe per queue), and each queue's tasks of one state are counted with a `LIMIT`. A
//! state's condition repeats its index's predicate word for word, so that SQLite (which only
//! matches predicate terms exactly) uses the same indexes PostgreSQL does.

use sked_core::TaskState;

use crate::states::{Spelling, TIMED};

/// The condition of the partial index that holds a state's tasks, with `queue` leading, as the
/// backend's indexes spell it.
fn index_predicate(state: TaskState, spelling: Spelling) -> String {
    match state {
        TaskState::Waiting => "state = 'waiting'".into(),
        TaskState::Scheduled | TaskState::Retrying => format!("state IN {TIMED}"),
        TaskState::Available => "state = 'available'".into(),
        TaskState::Running => "state = 'running'".into(),
        TaskState::Succeeded | TaskState::Dead | TaskState::Cancelled | TaskState::Expired => {
            spelling.finished()
        }
    }
}

/// The index predicates, each once.
fn groups(spelling: Spelling) -> Vec<String> {
    let mut groups: Vec<String> = Vec::new();
    for p in TaskState::ALL.map(|s| index_predicate(s, spelling)) {
        if !groups.contains(&p) {
            groups.push(p);
        }
    }
    groups
}

/// How many counts a row of [`queue_counts_sql`] or [`queue_page_sql`] has: one per state.
pub const COUNTS: usize = TaskState::ALL.len();

/// Where a row of [`queue_page_sql`] has its first setting (`paused`): after the queue and
/// its [`COUNTS`].
pub const SETTINGS_AT: usize = 1 + COUNTS;

/// The `LIMIT` to bind for counting up to `limit`: one more, to know whether there are more.
pub fn limit_probe(limit: u64) -> i64 {
    i64::try_from(limit.min(crate::QUEUE_COUNT_LIMIT_MAX)).unwrap_or(i64::MAX) + 1
}

/// `{name}(name) AS (…)`, for a `WITH RECURSIVE`: the distinct queues of the tasks that match
/// `cond`, in order and then one NULL, found by skipping from each queue to the next (one probe
/// per queue) through a partial index whose predicate `cond` repeats and that leads with the
/// queue.
pub fn queue_walk(name: &str, table: &str, cond: &str) -> String {
    format!(
        "{name}(name) AS ( \
           SELECT (SELECT queue FROM {table} WHERE {cond} ORDER BY queue LIMIT 1) \
           UNION ALL \
           SELECT (SELECT t.queue FROM {table} t WHERE {cond} AND t.queue > g.name \
             ORDER BY t.queue LIMIT 1) \
           FROM {name} g WHERE g.name IS NOT NULL)"
    )
}

/// The count columns of a row: `(SELECT count(*) …)` per state in [`TaskState::ALL`] order,
/// each taken with `LIMIT {limit}` (a placeholder: pass the limit plus one) over the tasks of
/// the queue `q.name`; with `kept` (the kept stages' parts: `sked_stages`, `stages`), the tasks its parts hold
/// added, not taken yet: to the waiting count, or the available one once released.
fn count_columns(table: &str, kept: Option<&str>, limit: &str, spelling: Spelling) -> String {
    let counts: Vec<String> = TaskState::ALL
        .iter()
        .map(|&s| {
            let state = format!("state = '{}'", s.as_str());
            // The state first: with the group's `IN` first, SQLite seeks each state of the
            // group and filters (82 ms for no dead task among 1,000,000 succeeded ones).
            let also = match index_predicate(s, spelling) {
                p if p == state => String::new(),
                p => format!(" AND {p}"),
            };
            let rows = format!(
                "(SELECT count(*) FROM (SELECT 1 FROM {table} t WHERE t.queue = q.name \
                 AND {state}{also} LIMIT {limit}) c)"
            );
            let released = match s {
                TaskState::Waiting => "NOT k.released",
                TaskState::Available => "k.released",
                _ => return rows,
            };
            match kept {
                Some(kept) => format!(
                    "({rows} + (SELECT coalesce(sum(k.size - k.taken), 0) \
                     FROM {kept} k WHERE k.queue = q.name AND {released}))"
                ),
                None => rows,
            }
        })
        .collect();
    counts.join(", ")
}

/// `SELECT queue, n_scheduled, n_available, …` for the one queue `queue` (a placeholder): the
/// counts in [`TaskState::ALL`] order, each taken with `LIMIT {limit}` (a placeholder: pass
/// the limit plus one).
pub fn queue_counts_sql(
    table: &str,
    kept: Option<&str>,
    limit: &str,
    queue: &str,
    spelling: Spelling,
) -> String {
    let counts = count_columns(table, kept, limit, spelling);
    format!("SELECT q.name, {counts} FROM (SELECT {queue} AS name) q")
}

/// `SELECT …`: one boolean, whether any task of any state is in the queue `queue` (a
/// placeholder), read through the same partial indexes as the counts (one probe each).
pub fn queue_has_tasks_sql(
    table: &str,
    kept: Option<&str>,
    queue: &str,
    spelling: Spelling,
) -> String {
    let mut probes: Vec<String> = groups(spelling)
        .iter()
        .map(|cond| format!("EXISTS (SELECT 1 FROM {table} WHERE queue = {queue} AND {cond})"))
        .collect();
    if let Some(kept) = kept {
        probes.push(format!(
            "EXISTS (SELECT 1 FROM {kept} WHERE queue = {queue})"
        ));
    }
    format!("SELECT {}", probes.join(" OR "))
}

/// `SELECT count(DISTINCT concurrency_key) …`: how many keys of the queue `queue` (a
/// placeholder) a dead task stops in strict order, counted among the queue's first `limit` (a
/// placeholder) dead tasks, read through the finished tasks' index.
pub fn keys_stopped_sql(table: &str, queue: &str, limit: &str, spelling: Spelling) -> String {
    let finished = index_predicate(TaskState::Dead, spelling);
    format!(
        "SELECT count(DISTINCT concurrency_key) FROM (SELECT concurrency_key FROM {table} \
         WHERE queue = {queue} AND state = 'dead' AND {finished} \
           AND concurrency_key IS NOT NULL LIMIT {limit}) d"
    )
}

/// The placeholders of [`queue_page_sql`].
#[derive(Debug, Clone, Copy)]
pub struct PagePlaceholders<'a> {
    /// Names sort after this one (text; `''` for the first page).
    pub after: &'a str,
    /// How many rows (the page's limit plus one).
    pub rows: &'a str,
    /// The counting limit plus one ([`limit_probe`]).
    pub count_probe: &'a str,
}

/// `SELECT queue, n_scheduled, …, n_cancelled, paused, concurrency_limit, rate_limit,
/// rate_period_ms, rate_burst, rate_bucket_at, per_key_limit, per_key_rate_limit,
/// per_key_rate_period_ms, retention_…_ms` (one per ended state, [`crate::retention::COLUMNS`]),
/// `backoff`, `key_order`:
/// a page of queues by
/// name after `after`, those with tasks and those with settings in `queues`, at most `rows`.
///
/// Each state's partial index is walked from `after` for at most `rows` distinct queues (one
/// probe per queue), so that the cost is bounded by the page, not by how many queues exist;
/// the counts are taken for the page's queues only.
pub fn queue_page_sql(
    tasks: &str,
    kept: Option<&str>,
    queues: &str,
    spelling: Spelling,
    p: PagePlaceholders<'_>,
) -> String {
    let PagePlaceholders {
        after,
        rows,
        count_probe,
    } = p;
    let groups = groups(spelling);
    let walks: Vec<String> = groups
        .iter()
        .enumerate()
        .map(|(i, cond)| {
            format!(
                "g{i}(name, n) AS ( \
                   SELECT (SELECT queue FROM {tasks} WHERE {cond} AND queue > {after} \
                     ORDER BY queue LIMIT 1), CAST(1 AS BIGINT) \
                   UNION ALL \
                   SELECT (SELECT t.queue FROM {tasks} t WHERE {cond} AND t.queue > g.name \
                     ORDER BY t.queue LIMIT 1), g.n + 1 \
                   FROM g{i} g WHERE g.name IS NOT NULL AND g.n < {rows})"
            )
        })
        .collect();
    let mut names: Vec<String> = (0..groups.len())
        .map(|i| format!("SELECT name FROM g{i}"))
        .collect();
    names.push(format!(
        "SELECT name FROM (SELECT name FROM {queues} WHERE name > {after} \
         ORDER BY name LIMIT {rows}) s"
    ));
    if let Some(kept) = kept {
        names.push(format!(
            "SELECT name FROM (SELECT DISTINCT queue AS name FROM {kept} WHERE queue > {after} \
             ORDER BY name LIMIT {rows}) k"
        ));
    }
    let counts = count_columns(tasks, kept, count_probe, spelling);
    format!(
        "WITH RECURSIVE {}, names(name) AS ({}) \
         SELECT q.name, {counts}, coalesce(k.paused, false), k.concurrency_limit, \
           k.rate_limit, k.rate_period_ms, k.rate_burst, k.rate_bucket_at, k.per_key_limit, \
           k.per_key_rate_limit, k.per_key_rate_period_ms, {}, k.backoff, k.key_order \
         FROM (SELECT name FROM names WHERE name IS NOT NULL ORDER BY name LIMIT {rows}) q \
         LEFT JOIN {queues} k ON k.name = q.name ORDER BY q.name",
        walks.join(", "),
        names.join(" UNION "),
        crate::retention::COLUMNS
            .map(|c| format!("k.{c}"))
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_index_group() {
        for spelling in [Spelling::InList, Spelling::AnyOf] {
            let groups = groups(spelling);
            assert_eq!(
                groups.len(),
                5,
                "waiting, timed, available, running, finished"
            );
            for s in TaskState::ALL {
                let p = index_predicate(s, spelling);
                assert!(groups.contains(&p), "{s:?}");
                assert!(p.contains(&format!("'{}'", s.as_str())));
            }
        }
    }

    #[test]
    fn the_groups_are_spelled_as_the_state_lists() {
        use crate::states::{FINISHED, FINISHED_ANY};
        assert_eq!(
            index_predicate(TaskState::Retrying, Spelling::AnyOf),
            format!("state IN {TIMED}")
        );
        assert_eq!(
            index_predicate(TaskState::Dead, Spelling::InList),
            format!("state IN {FINISHED}")
        );
        assert_eq!(
            index_predicate(TaskState::Dead, Spelling::AnyOf),
            FINISHED_ANY
        );
    }
}
