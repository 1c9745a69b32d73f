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
mod open;
pub mod protocol;
pub mod server_clock;
pub mod worker;

pub use client::Client;
pub use engine::{
    ALIVE_FOR, BEAT_EVERY, ClaimRequest, ClusterInfo, Engine, EngineConfig, Presence, TaskFilter,
};
pub use error::{Error, Result};
pub use maintenance::MaintenanceConfig;
pub use sked_core as core;
pub use sked_store::{self as store, Store};

pub use open::{Scratch, open_scratch_store, open_store};
pub use server_clock::node_clock;
