//! The sked engine library: what a Rust service embeds and what `sked server` runs.
//!
//! - [`Engine`]: enqueue, claim, finish, cancel, schedules and queues, on any [`Store`].
//! - [`maintenance`]: leader-only duties (materialising schedules, rescuing expired leases,
//!   pruning), run by whichever node holds the leader lease.
//! - [`worker`]: a pool that claims tasks and runs them with [`executors`], with heartbeats,
//!   timeouts and cancellation.

mod batch;
mod engine;
mod error;
pub mod executors;
pub mod maintenance;
pub mod server_clock;
pub mod worker;

pub use engine::{ClaimRequest, Engine, EngineConfig};
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
