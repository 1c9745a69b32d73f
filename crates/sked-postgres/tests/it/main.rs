//! The integration tests of the PostgreSQL backend, linked as one binary: the conformance
//! suite, transactional enqueue and abandoned transactions.

mod abandoned;
mod announce;
mod claimers;
mod conformance;
mod next_due;
mod plans;
mod reserved;
mod resume;
mod room;
mod snapshot;
mod sql_enqueue;
mod taking_turns;
mod transactional;
mod waits;

/// A claim by worker `w` of at most `max` tasks from `queues` (every queue when empty) at
/// `now`, leased for a minute.
fn claim_params(queues: &[&str], max: u32, now: jiff::Timestamp) -> sked_store::TaskClaimParams {
    sked_store::TaskClaimParams {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        kinds: vec![],
        max,
        min_priority: None,
        worker: "w".into(),
        lease_ttl: jiff::SignedDuration::from_secs(60),
        timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
        now,
    }
}

/// The URL of a connection of the application's whose `search_path` reaches `schema`'s tables.
fn schema_url(schema: &sked_postgres::testing::TestSchema) -> String {
    let sep = if schema.base_url.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{sep}options=-csearch_path%3D{}",
        schema.base_url, schema.name
    )
}
