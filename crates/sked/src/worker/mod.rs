//! Workers run the user's code. Register a handler per task kind (its payload deserialised
//! into the handler's own type), choose concurrency per worker and per queue, declare the
//! service's recurring schedules, and run, embedded on an [`Engine`](crate::Engine) or remote
//! against a `sked server`, through the same [`Client`].
//!
//! ```no_run
//! # async fn example(client: sked::Client) -> sked::Result<()> {
//! use sked::worker::{HandlerResult, TaskContext, Worker};
//!
//! #[derive(serde::Deserialize)]
//! struct Email { to: String }
//!
//! Worker::new(client)
//!     .handle("email", |_ctx: TaskContext, email: Email| async move {
//!         println!("sending to {}", email.to);
//!         HandlerResult::Ok(())
//!     })
//!     .queue("default", 10)
//!     .run(async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! What the worker guarantees:
//! - Leases: everything it holds (running or prefetched) is heartbeated in one call every
//!   third of the lease; a task whose lease was lost (rescued) is stopped and its result never
//!   reported, so the new attempt's result stands.
//! - Prefetch: claimed tasks wait in a buffer ordered by priority; when the buffer is full and
//!   more urgent work arrives, the worker claims it and gives back its least urgent task.
//! - Timeouts drop the handler's future (it stops at its next `.await`) and count as a
//!   retryable failure; a panic is a retryable failure and the worker goes on.
//! - Shutdown: stop claiming, give back the buffer at once, let running tasks finish within
//!   the grace period, then stop them and give them back (claimable at once, no attempt spent).

mod handler;
mod lane;
mod shared;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::SignedDuration;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sked_core::ScheduleDef;
use tokio::sync::{Semaphore, mpsc, watch};

pub use handler::{Handler, HandlerResult, TaskContext, TaskError};
pub use shared::WorkerReport;

use crate::client::Client;
use crate::executors::Executor;
use crate::{Error, Result};
use handler::{Erased, ExecutorHandler, FnHandler, Typed};
use lane::{Deadline, Lane, LaneConfig};

/// A worker: handlers, lanes and settings. Build it, then [`Worker::run`] or
/// [`Worker::run_for`].
pub struct Worker {
    client: Client,
    id: String,
    handlers: HashMap<String, Arc<dyn Erased>>,
    /// Lanes of their own (queue, concurrency); none means one lane over `queues`.
    lanes: Vec<(String, usize)>,
    queues: Vec<String>,
    concurrency: Option<usize>,
    prefetch: Option<usize>,
    lease_ttl: Option<SignedDuration>,
    shutdown_grace: Duration,
    cancel_grace: Duration,
    claim_wait: Duration,
    declared: Option<(String, Vec<ScheduleDef>)>,
    initial_estimate: Duration,
    tolerance: f64,
    telemetry: crate::Telemetry,
}

impl Worker {
    /// A worker on `client` (embedded or remote), named after the engine's node (or a new
    /// id when remote), with no handlers yet: 10 tasks at once over every queue.
    pub fn new(client: impl Into<Client>) -> Worker {
        let client = client.into();
        let (node, telemetry) = match client.engine() {
            Some(e) => (e.config().node_id.clone(), e.config().telemetry.clone()),
            None => (crate::engine::default_node_id(), crate::Telemetry::off()),
        };
        Worker {
            client,
            id: node,
            handlers: HashMap::new(),
            lanes: Vec::new(),
            queues: Vec::new(),
            concurrency: None,
            prefetch: None,
            lease_ttl: None,
            shutdown_grace: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(5),
            claim_wait: Duration::from_secs(30),
            declared: None,
            initial_estimate: Duration::from_secs(1),
            tolerance: 1.5,
            telemetry,
        }
    }

    /// Where the spans of its runs go: each run is a span (`sked.run KIND`) in the trace of
    /// its task, and the handler runs inside it. An embedded worker takes its engine's;
    /// a remote one records none unless given one here.
    pub fn telemetry(mut self, telemetry: crate::Telemetry) -> Worker {
        self.telemetry = telemetry;
        self
    }

    /// This worker's name in task history.
    pub fn id(mut self, id: impl Into<String>) -> Worker {
        self.id = id.into();
        self
    }

    /// Tasks run at once by the whole worker (default 10; with [`Worker::queue`] lanes, their
    /// sum unless set).
    pub fn concurrency(mut self, n: usize) -> Worker {
        self.concurrency = Some(n.max(1));
        self
    }

    /// A queue worked with its own concurrency (a lane of its own, with its own buffer).
    pub fn queue(mut self, name: impl Into<String>, concurrency: usize) -> Worker {
        self.lanes.push((name.into(), concurrency.max(1)));
        self
    }

    /// Queues worked together, sharing the worker's concurrency (all when none are named).
    pub fn queues(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Worker {
        self.queues = names.into_iter().map(Into::into).collect();
        self
    }

    /// Claimed tasks that may wait in a lane's buffer for a free slot (default: as many as
    /// the lane's concurrency).
    pub fn prefetch(mut self, n: usize) -> Worker {
        self.prefetch = Some(n);
        self
    }

    /// The lease asked for claimed tasks (default: the engine's, or 30 s remote).
    pub fn lease_ttl(mut self, ttl: Duration) -> Worker {
        self.lease_ttl = SignedDuration::try_from(ttl).ok();
        self
    }

    /// How long running tasks may take to finish after shutdown is asked (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Worker {
        self.shutdown_grace = grace;
        self
    }

    /// How long a handler may take to stop after its task's cancellation (default 5 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Worker {
        self.cancel_grace = grace;
        self
    }

    /// The longest one claim waits for work (default 30 s).
    pub fn claim_wait(mut self, wait: Duration) -> Worker {
        self.claim_wait = wait;
        self
    }

    /// For [`Worker::run_for`]: a run is expected to take the average observed run time (or
    /// `initial` before any run was seen, default 1 s) times `tolerance` (default 1.5).
    pub fn runtime_estimate(mut self, initial: Duration, tolerance: f64) -> Worker {
        self.initial_estimate = initial;
        self.tolerance = tolerance.max(1.0);
        self
    }

    /// A typed handler for tasks of `kind`.
    pub fn handler<H: Handler>(mut self, kind: impl Into<String>, handler: H) -> Worker {
        self.handlers
            .insert(kind.into(), Arc::new(Typed(Arc::new(handler))));
        self
    }

    /// A closure handler for tasks of `kind`: `|ctx, payload: MyType| async move { … }`.
    pub fn handle<P, F, Fut, O>(self, kind: impl Into<String>, f: F) -> Worker
    where
        F: Fn(TaskContext, P) -> Fut + Send + Sync + 'static,
        P: DeserializeOwned + Send + 'static,
        Fut: Future<Output = HandlerResult<O>> + Send + 'static,
        O: Serialize + Send + 'static,
    {
        self.handler(kind, FnHandler::new(f))
    }

    /// A built-in executor (`shell`, `http`) for its kind.
    pub fn executor(mut self, exec: Arc<dyn Executor>) -> Worker {
        self.handlers
            .insert(exec.kind().to_string(), Arc::new(ExecutorHandler(exec)));
        self
    }

    /// Declares this service's recurring schedules, kept in sync at start-up: created when
    /// new, updated when changed (an operator's pause is kept), and those `group` declared
    /// before but declares no more are deleted. Schedules made at run time (API, CLI) and
    /// other groups' are left alone.
    pub fn schedules(mut self, group: impl Into<String>, defs: Vec<ScheduleDef>) -> Worker {
        self.declared = Some((group.into(), defs));
        self
    }

    /// Runs until `shutdown` resolves, then shuts down gracefully.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<WorkerReport> {
        self.run_inner(shutdown, None).await
    }

    /// Runs for at most `max_runtime`: stops claiming when the next task would likely not
    /// finish in time (average observed run time × tolerance), finishes in-flight work and
    /// returns before the time is up (or earlier, at `shutdown`).
    pub async fn run_for(
        self,
        max_runtime: Duration,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<WorkerReport> {
        self.run_inner(shutdown, Some(max_runtime)).await
    }

    async fn run_inner(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        max_runtime: Option<Duration>,
    ) -> Result<WorkerReport> {
        let started = tokio::time::Instant::now();
        if self.handlers.is_empty() {
            return Err(Error::Invalid("a worker needs at least one handler".into()));
        }
        sked_core::validate_name("worker", &self.id)?;
        if let Some((group, defs)) = &self.declared {
            let report = self.client.schedules_sync(group, defs.clone()).await?;
            tracing::info!(
                group,
                created = ?report.created,
                updated = ?report.updated,
                removed = ?report.removed,
                unchanged = report.unchanged.len(),
                "declared schedules in sync"
            );
        }
        let lease_ttl = self
            .lease_ttl
            .unwrap_or_else(|| self.client.default_lease_ttl());
        let lanes: Vec<LaneConfig> = if self.lanes.is_empty() {
            let concurrency = self.concurrency.unwrap_or(10);
            vec![LaneConfig {
                queues: self.queues.clone(),
                concurrency,
                prefetch: self.prefetch.unwrap_or(concurrency),
            }]
        } else {
            self.lanes
                .iter()
                .map(|(q, n)| LaneConfig {
                    queues: vec![q.clone()],
                    concurrency: *n,
                    prefetch: self.prefetch.unwrap_or(*n),
                })
                .collect()
        };
        let total = self
            .concurrency
            .unwrap_or_else(|| lanes.iter().map(|l| l.concurrency).sum());
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        kinds.sort();
        let (finish_tx, finish_rx) = mpsc::unbounded_channel();
        let mut queues: Vec<String> = lanes.iter().flat_map(|l| l.queues.clone()).collect();
        if lanes.iter().any(|l| l.queues.is_empty()) {
            queues.clear();
        }
        let mut presence = crate::Presence {
            id: self.id.clone(),
            role: "worker".into(),
            queues,
            concurrency: u32::try_from(total).ok(),
            stopping: false,
        };
        let shared = Arc::new(shared::Shared {
            presence: presence.clone(),
            client: self.client.clone(),
            worker: self.id.clone(),
            kinds,
            handlers: self.handlers,
            lease_ttl,
            cancel_grace: self.cancel_grace,
            holdings: Mutex::new(HashMap::new()),
            finisher: finish_tx,
            slots: Arc::new(Semaphore::new(total.max(1))),
            stats: Mutex::new(shared::Stats::default()),
            initial_estimate: self.initial_estimate,
            telemetry: self.telemetry,
        });
        // Tell sked this worker is here before any lane claims, so that a claim's sign of life
        // finds it told (one write, not a claim's and this one's at once).
        if let Err(e) = self.client.beat(&presence).await {
            tracing::debug!(error = %e, "could not tell sked this worker is alive");
        }
        let finisher = tokio::spawn(shared::finish(self.client.clone(), lease_ttl, finish_rx));
        let (stop_tx, stop_rx) = watch::channel(false);
        let heartbeater = tokio::spawn(shared::heartbeat(shared.clone(), stop_rx.clone()));
        let deadline = max_runtime.map(|max| Deadline {
            // Time to give back what is left and exit, within the limit.
            hard_stop: started + max - (max / 10).min(Duration::from_secs(1)),
            tolerance: self.tolerance,
        });
        tracing::info!(worker = %self.id, kinds = ?shared.kinds, lanes = lanes.len(), concurrency = total, "worker started");
        let mut running = tokio::task::JoinSet::new();
        for cfg in lanes {
            let lane = Lane::new(shared.clone(), cfg, deadline, self.claim_wait);
            running.spawn(lane.run(stop_rx.clone(), self.shutdown_grace));
        }
        let lanes_done = async { while running.join_next().await.is_some() {} };
        tokio::pin!(lanes_done);
        tokio::select! {
            _ = &mut lanes_done => {}
            _ = shutdown => {
                let _ = stop_tx.send(true);
                lanes_done.await;
            }
        }
        let _ = stop_tx.send(true);
        let _ = heartbeater.await;
        let report = shared::lock(&shared.stats).report.clone();
        drop(shared);
        // Every lane is done: the finisher drains what is left and ends.
        let _ = finisher.await;
        presence.stopping = true;
        if let Err(e) = self.client.beat(&presence).await {
            tracing::debug!(error = %e, "could not tell sked this worker stopped");
        }
        tracing::info!(worker = %self.id, ?report, "worker stopped");
        Ok(report)
    }
}
