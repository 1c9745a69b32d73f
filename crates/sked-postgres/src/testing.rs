//! Test support (the `testing` feature, for tests only): a fresh schema per test in the
//! database named by `SKED_TEST_DATABASE_URL`. Used by this crate's conformance run and by the
//! end-to-end tests of the other crates.

pub use crate::scratch::ScratchSchema as TestSchema;

/// The variable naming the test database.
pub const DATABASE_URL_VAR: &str = "SKED_TEST_DATABASE_URL";

/// The test database's URL. `None` (the PostgreSQL tests are skipped) when the variable is
/// unset, unless `CI` is set: CI must run them, so there it is a failure.
pub fn database_url() -> Option<String> {
    match std::env::var(DATABASE_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{DATABASE_URL_VAR} is not set, and CI must run the PostgreSQL tests")
        }
        _ => None,
    }
}

/// A store on a fresh schema, with the guard that drops it; `None` when no test database is set.
pub async fn fresh_store() -> Option<(crate::PgStore, TestSchema)> {
    let url = database_url()?;
    let schema = TestSchema::new(&url);
    let store = crate::PgStore::connect(schema.options())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    Some((store, schema))
}

/// The statement of a claim over every queue (`$1` now, `$2` the lease's end, `$3` the
/// worker, `$4` at most how many), for tests of its query plan; with `after`, the claim that
/// resumes after a claim-order key (`$5` priority, `$6` run time, `$7` id).
pub fn claim_sql(after: bool) -> String {
    crate::tasks::claim::claim_sql("state = 'available'", after, true)
}

/// The planner setting a claim runs under, and its reset (see `tasks::claim::ORDERED_WALK`),
/// for tests of its plan.
pub fn claim_planner_setting() -> (&'static str, &'static str) {
    use crate::tasks::claim::{ORDERED_WALK, ORDERED_WALK_END};
    (ORDERED_WALK, ORDERED_WALK_END)
}

/// The statement of a batch of `n` successes (`$1` ids, `$2` attempts, `$3` times, `$4`
/// results), returning the ids, for tests of its plan.
pub fn success_sql(n: usize) -> String {
    crate::tasks::ending::success_sql(n)
}

/// A heartbeat's statement (`$1` id, `$2` attempt, `$3` lease end, `$4` grace in ms, `$5`
/// now), for tests of its plan.
pub fn heartbeat_sql() -> String {
    crate::tasks::claim::HEARTBEAT.clone()
}

/// Retention's statement (`$1` finished before, `$2` at most how many), for tests of its plan.
pub fn prune_sql() -> String {
    crate::tasks::PRUNE.clone()
}

/// Retention's statement for a bounded pass (`$3` finished since), for tests of its plan.
pub fn prune_since_sql() -> String {
    crate::tasks::PRUNE_SINCE.clone()
}

/// The statement of ended tasks per time bucket (`$1` since, `$2` the bucket's width in µs),
/// for tests of its plan.
pub fn activity_sql() -> String {
    crate::observe::ENDED.clone()
}
