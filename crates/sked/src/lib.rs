//! The sked engine library: what a Rust service embeds and what `sked server` runs.
//!
//! - [`Engine`]: enqueue, claim, finish, cancel, schedules and queues, on any [`Store`].
//! - [`maintenance`]: leader-only duties (materialising schedules, rescuing expired leases,
//!   pruning), run by whichever node holds the leader lease.
//! - [`Client`]: enqueue, schedules, status queries and the worker protocol, embedded or remote.
//! - [`worker`]: typed handlers run with heartbeats, timeouts, cancellation, a priority-ordered
//!   prefetch buffer, graceful shutdown and bounded runs; schedules declared in code.

mod batch;
pub mod client;
mod engine;
mod error;
pub mod executors;
pub mod maintenance;
mod metrics;
pub mod protocol;
pub mod server_clock;
pub mod worker;

pub use client::Client;
pub use engine::{
    ALIVE_FOR, BEAT_EVERY, ClaimRequest, ClusterInfo, Engine, EngineConfig, Presence,
};
pub use error::{Error, Result};
pub use sked_core as core;
pub use sked_store::{self as store, Store};

pub use server_clock::node_clock;

/// Opens the store named by a database URL: `postgres://…` (or `postgresql://…`) for
/// PostgreSQL, `sqlite://PATH` or a plain path for SQLite.
pub async fn open_store(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = sked_postgres::PgStore::connect_url(url).await?;
        return Ok(std::sync::Arc::new(store));
    }
    Ok(std::sync::Arc::new(sked_sqlite::SqliteStore::open_url(
        url,
    )?))
}
