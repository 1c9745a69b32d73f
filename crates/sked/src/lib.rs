//! The sked engine library: what a Rust service embeds and what `sked server` runs.
//!
//! Embedding sked is a [`Node`]: a store (SQLite here; PostgreSQL with the `postgres`
//! feature), maintenance (schedules fire, expired leases are rescued) and a worker with typed
//! handlers, stopped gracefully on Ctrl-C:
//!
//! ```no_run
//! use sked::{NewTask, Node, worker::{HandlerResult, TaskContext}};
//!
//! #[derive(serde::Deserialize)]
//! struct Email { to: String }
//!
//! async fn send(_ctx: TaskContext, email: Email) -> HandlerResult {
//!     println!("mailing {}", email.to);
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> sked::Result<()> {
//!     let node = Node::builder().db("sqlite://app.db").worker(|w| w.handle("email", send)).start().await?;
//!     node.client().enqueue(NewTask::new("email").payload(serde_json::json!({"to": "ada@example.com"}))).await?;
//!     node.run_until(async { tokio::signal::ctrl_c().await.unwrap() }).await?;
//!     Ok(())
//! }
//! ```
//!
//! The parts, for more control:
//! - [`Engine`]: enqueue, claim, finish, cancel, schedules and queues, on any [`Store`].
//! - [`maintenance`]: the duties one node does for all (leader election, materialising
//!   schedules, rescuing expired leases, pruning), run by every node through [`Node`].
//! - [`Client`]: enqueue, schedules, status queries and the worker protocol, embedded or remote.
//! - [`worker`]: typed handlers run with heartbeats, timeouts, cancellation, a priority-ordered
//!   prefetch buffer, graceful shutdown and bounded runs; schedules declared in code.
//! - [`telemetry`]: OpenTelemetry spans of enqueue, claim and run, linked by the trace
//!   context each task carries.

#![warn(missing_docs)]

pub mod api;
pub mod client;
mod engine;
mod error;
pub mod executors;
mod group_commit;
pub mod maintenance;
// Without the `metrics` feature the engine's recording calls do nothing.
#[cfg_attr(not(feature = "metrics"), path = "metrics_off.rs")]
mod metrics;
pub mod node;
mod open;
mod server_clock;
pub mod telemetry;
pub mod worker;

pub use client::Client;
pub use engine::{
    ApplyOptions, ClaimRequest, Engine, EngineConfig, MAX_BACKFILL, MAX_CLAIM_NAMES, Presence,
    TaskFilter, WorkflowMade,
};
pub use error::{Error, Result};
pub use maintenance::MaintenanceConfig;
pub use node::{Node, NodeBuilder};
pub use sked_core as core;
pub use sked_core::{
    Backoff, CalendarDef, CatchupPolicy, Clock, DstPolicy, IntervalFrom, ManualClock, NewTask,
    NewWorkflow, OverlapPolicy, ParentFailure, RateLimit, ScheduleDef, SystemClock, Task, TaskId,
    TaskState, TaskTemplate, WorkflowId, WorkflowTask,
};
pub use sked_store::{self as store, Store};
pub use sked_store::{
    BackfillReport, BatchInfo, BatchState, CalendarInfo, FinishOutcome, Occurrence, QueueInfo,
    Schedule, TaskEnded, TaskInserted, WorkflowInfo, WorkflowNode, WorkflowState,
};

#[cfg(feature = "bench")]
pub use open::{Scratch, open_scratch_store, open_scratch_stores};
pub use open::{open_store, redacted_url};
pub use server_clock::node_clock;
pub use telemetry::Telemetry;
