//! The [`Engine`]: every operation on tasks, schedules and queues, on top of a [`Store`], with
//! validation, the injected clock and in-process wake-ups. One file per concern:
//!
//! - `tasks.rs`: enqueue, look up, cancel, retry, reschedule;
//! - `claims.rs`: claims (with long-poll), heartbeats and attempt endings;
//! - `waiting_claims.rs`: a task enqueued here goes straight to a worker waiting here;
//! - `schedules.rs`: schedules made at run time or declared in code, trigger, the ledger, and
//!   one materialisation pass;
//! - `queues.rs`: queue counts, pause, resume, limits;
//! - `observe.rs`: presence of workers and nodes, activity, the cluster's leader, metrics;
//! - `wake.rs`: wake-ups, the work counter and the next-due hint, from this node's changes and
//!   the store's announcements.
//!
//! The leader-only duties that use these operations (rescue, pruning, materialising on time)
//! are in [`crate::maintenance`].

mod batches;
mod claims;
mod observe;
mod queues;
mod schedules;
mod task_waits;
mod tasks;
mod waiting_claims;
mod wake;
mod workflows;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use sked_core::{Clock, SystemClock};
use sked_store::Store;
use tokio::sync::Notify;

use crate::group_commit::FinishBatcher;
use crate::metrics::Metrics;

pub use claims::{ClaimRequest, MAX_CLAIM_NAMES};
pub(crate) use observe::BEAT_EVERY;
pub use observe::LEADER_LEASE;
pub use observe::Presence;
pub use schedules::{ApplyOptions, MAX_BACKFILL};
pub use tasks::TaskFilter;
pub use workflows::WorkflowMade;

/// Settings of one engine (one node).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineConfig {
    /// This node's name in leases and task history.
    pub node_id: String,
    /// How long a claimed task's lease lasts without a heartbeat.
    pub lease_ttl: SignedDuration,
    /// A task with a timeout is leased at most this long past its timeout: a worker that
    /// ignores the timeout but keeps heartbeating loses the task then, and it runs again.
    pub timeout_grace: SignedDuration,
    /// Where the spans of enqueues and claims go (off by default).
    pub telemetry: crate::Telemetry,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig::with_lease_ttl(SignedDuration::from_secs(30))
    }
}

impl EngineConfig {
    /// Settings with this task lease TTL and a node id made of the host name, the process id
    /// and a random number.
    pub fn with_lease_ttl(lease_ttl: SignedDuration) -> EngineConfig {
        EngineConfig {
            node_id: default_node_id(),
            lease_ttl,
            timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
            telemetry: crate::Telemetry::off(),
        }
    }

    /// The same settings with spans going to `telemetry`.
    pub fn telemetry(mut self, telemetry: crate::Telemetry) -> EngineConfig {
        self.telemetry = telemetry;
        self
    }

    /// The same settings with this grace after a task's timeout.
    pub fn timeout_grace(mut self, grace: SignedDuration) -> EngineConfig {
        self.timeout_grace = grace;
        self
    }

    /// The same settings under another node id.
    pub fn node_id(mut self, node_id: impl Into<String>) -> EngineConfig {
        self.node_id = node_id.into();
        self
    }
}

/// `HOSTNAME-PID-XXXX`: unique per process, readable in task history.
pub(crate) fn default_node_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

/// The scheduler engine of one node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    /// Woken when tasks may have become claimable (enqueue, retry, release).
    tasks_changed: Notify,
    /// Grows each time `tasks_changed` is woken: lets a worker ask "anything new since?".
    work_epoch: AtomicU64,
    /// Woken when schedules changed or a scheduled task finished (overlap, buffers).
    schedules_changed: Notify,
    /// Schedules a run of which ended here since the scheduler last looked: those waiting for
    /// a run to end are planned at once (a hint; without it they are planned at the time of
    /// the occurrence that waits).
    runs_ended: Mutex<std::collections::BTreeSet<String>>,
    /// Woken when a lease was given up somewhere.
    leases_changed: Notify,
    /// The store announces other processes' changes and its listener is up: no need to poll.
    announced: AtomicBool,
    /// Until when this node may act as leader, on the monotonic clock (set by
    /// [`crate::maintenance`]): leadership lapses by itself at that instant, even while the
    /// elector waits for a database that does not answer.
    leader_until: Mutex<Option<tokio::time::Instant>>,
    /// When the next waiting task is due, as far as this node knows.
    next_due: Mutex<wake::DueHint>,
    finisher: FinishBatcher,
    metrics: Metrics,
    /// When each worker's presence was last written, to write it at most every
    /// [`BEAT_EVERY`].
    beats: Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// Claims waiting here for work, which a task enqueued here may go to directly.
    waiters: Mutex<waiting_claims::Waiters>,
    /// Callers waiting for tasks to end ([`Engine::task_wait`]).
    task_waits: Arc<task_waits::TaskWaits>,
}

impl Engine {
    /// An engine on `store` with the system clock (corrected to the database's clock by
    /// [`crate::node_clock`] when nodes share one; [`crate::Node`] does that).
    pub fn new(store: Arc<dyn Store>, config: EngineConfig) -> Engine {
        Engine::with_clock(store, Arc::new(SystemClock), config)
    }

    /// An engine with its own clock: tests pass a [`sked_core::ManualClock`].
    pub fn with_clock(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Engine {
        let finisher = FinishBatcher::new(store.clone());
        let events = store.subscribe();
        let inner = Arc::new(Inner {
            store,
            clock,
            config,
            tasks_changed: Notify::new(),
            work_epoch: AtomicU64::new(0),
            schedules_changed: Notify::new(),
            runs_ended: Mutex::new(std::collections::BTreeSet::new()),
            leases_changed: Notify::new(),
            announced: AtomicBool::new(false),
            leader_until: Mutex::new(None),
            next_due: Mutex::new(wake::DueHint::default()),
            finisher,
            metrics: Metrics::new(),
            beats: Mutex::new(std::collections::HashMap::new()),
            waiters: Mutex::new(waiting_claims::Waiters::default()),
            task_waits: Default::default(),
        });
        if let (Some(events), Ok(rt)) = (events, tokio::runtime::Handle::try_current()) {
            // Subscribed first: a change of state after this read arrives as an event.
            inner
                .announced
                .store(inner.store.listening(), Ordering::Relaxed);
            rt.spawn(wake::follow_announcements(Arc::downgrade(&inner), events));
        }
        Engine { inner }
    }

    /// The store this engine works on.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// This engine's settings.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// The time by this engine's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Whether this node holds the leader lease and does the leader-only duties.
    pub fn is_leader(&self) -> bool {
        lock(&self.inner.leader_until).is_some_and(|until| tokio::time::Instant::now() < until)
    }

    /// Makes this node the leader until `until` (`None`: not the leader).
    pub(crate) fn set_leader(&self, until: Option<tokio::time::Instant>) {
        *lock(&self.inner.leader_until) = until;
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every item of a list, read page by page by name: `page(after)` reads one page.
async fn every_page<T: sked_store::page::Named>(
    mut page: impl AsyncFnMut(Option<String>) -> crate::error::Result<sked_store::Page<T>>,
) -> crate::error::Result<Vec<T>> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let p = page(after).await?;
        after = p.next_after();
        all.extend(p.items);
        if after.is_none() {
            return Ok(all);
        }
    }
}
