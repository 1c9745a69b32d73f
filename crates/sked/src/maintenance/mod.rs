//! Maintenance: the duties the nodes of a cluster do for all, as separate units, each with
//! its own settings and tests:
//!
//! - [`Scheduler`] (`scheduler.rs`): turns schedule occurrences into tasks, ahead of their
//!   time; every node runs it and takes a share;
//! - [`Elector`] (`leader.rs`): takes and renews the leader lease;
//! - [`Rescuer`] (`rescuer.rs`): gives back tasks whose lease expired (leader only);
//! - [`Pruner`] (`pruner.rs`): deletes old finished tasks (leader only).
//!
//! [`run`] drives them: every node that runs it plans schedules and takes part in the
//! election, and the one holding the lease rescues and prunes. Idle, a node asks the store
//! only when something is due; see `BENCHMARKS.md`.

mod leader;
mod pruner;
mod rescuer;
mod scheduler;

use std::time::Duration;

use jiff::SignedDuration;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Engine;

pub use leader::{Elector, LEADER_LEASE, LeaderConfig, Step};
pub use pruner::{Pruner, PrunerConfig};
pub use rescuer::{Rescuer, RescuerConfig};
pub use scheduler::{DEFAULT_LOOK_AHEAD, Pass, Scheduler, SchedulerConfig};

/// The settings of every maintenance unit.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MaintenanceConfig {
    /// The leader lease.
    pub leader: LeaderConfig,
    /// Materialising schedules.
    pub scheduler: SchedulerConfig,
    /// Rescuing expired leases.
    pub rescuer: RescuerConfig,
    /// Pruning finished tasks.
    pub pruner: PrunerConfig,
}

impl Default for MaintenanceConfig {
    /// Each unit's defaults, the scheduler looking [`DEFAULT_LOOK_AHEAD`] ahead.
    fn default() -> MaintenanceConfig {
        MaintenanceConfig {
            leader: LeaderConfig::default(),
            scheduler: SchedulerConfig {
                look_ahead: DEFAULT_LOOK_AHEAD,
                ..SchedulerConfig::default()
            },
            rescuer: RescuerConfig::default(),
            pruner: PrunerConfig::default(),
        }
    }
}

impl MaintenanceConfig {
    /// Settings that follow the task lease TTL: the leader lease lasts as long, at most 15 s
    /// (a short task lease suggests a quick failover is wanted for the leader too), and
    /// expired leases are looked for every tenth of it (between 250 ms and 3 s).
    pub fn for_lease_ttl(lease_ttl: SignedDuration) -> MaintenanceConfig {
        MaintenanceConfig {
            leader: LeaderConfig {
                ttl: lease_ttl.min(SignedDuration::from_secs(15)),
            },
            rescuer: RescuerConfig::for_lease_ttl(lease_ttl),
            ..MaintenanceConfig::default()
        }
    }

    /// The same settings with another retention of finished tasks.
    pub fn retention(mut self, retention: SignedDuration) -> MaintenanceConfig {
        self.pruner.retention = retention;
        self
    }
}

/// Plans schedules and runs the election and, while this node leads, the rescuer and the
/// pruner, until `shutdown` turns true; gives the lease up on the way out.
pub async fn run(engine: Engine, config: MaintenanceConfig, shutdown: watch::Receiver<bool>) {
    let scheduler = Scheduler::new(config.scheduler.clone());
    tokio::join!(
        plan_schedules(engine.clone(), scheduler, shutdown.clone()),
        lead(engine, config, shutdown)
    );
}

/// How long the scheduler, told of a change, waits for more before it plans.
const GATHER_CHANGES: Duration = Duration::from_millis(20);

/// Plans schedules whenever one needs it, or a change or a run's end is told, until
/// `shutdown` turns true.
async fn plan_schedules(engine: Engine, scheduler: Scheduler, mut shutdown: watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow() {
            break;
        }
        // Listen before working, so a change during the pass is not missed.
        let changed = engine.schedules_changed().notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let wait = scheduler.pass_and_plan(&engine).await;
        tokio::select! {
            // Runs end in bursts: the ends of one are planned together.
            _ = &mut changed => tokio::time::sleep(GATHER_CHANGES).await,
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The election and, while this node leads, the rescuer and the pruner.
async fn lead(engine: Engine, config: MaintenanceConfig, mut shutdown: watch::Receiver<bool>) {
    let mut elector = Elector::new(config.leader.clone(), Instant::now());
    let rescuer = Rescuer::new(config.rescuer.clone());
    let pruner = Pruner::new(config.pruner.clone());
    let mut next_rescue = Instant::now();
    let mut next_prune = Instant::now();
    let mut presence = crate::Presence {
        id: engine.config().node_id.clone(),
        role: "node".into(),
        ..crate::Presence::default()
    };
    loop {
        if *shutdown.borrow() {
            break;
        }
        // This node's sign of life, for the dashboard's list of nodes (written every minute);
        // a database that does not answer must not hold the election up.
        let _ = tokio::time::timeout(
            to_std(config.leader.ttl / 3),
            engine.seen(&presence.id, || presence.clone()),
        )
        .await;
        // Listen before working, so a change during the pass is not missed.
        let leases_changed = engine.leases_changed().notified();
        tokio::pin!(leases_changed);
        leases_changed.as_mut().enable();
        let step = elector.step(&engine, Instant::now()).await;
        let mut wake_at = step
            .next_try
            .min(Instant::now() + crate::engine::BEAT_EVERY);
        if let (true, Some(until)) = (step.leader, step.leader_until) {
            // The duties end with the leadership, even mid-request.
            let duties = async {
                if Instant::now() >= next_rescue {
                    let started = Instant::now();
                    let wait = match rescuer.pass(&engine).await {
                        Ok(pass) => rescuer.wait_after(pass.most(), started.elapsed()),
                        Err(e) => {
                            tracing::warn!(error = %e, "rescue failed");
                            to_std(rescuer.config().interval)
                        }
                    };
                    next_rescue = Instant::now() + wait;
                }
                if Instant::now() >= next_prune {
                    let pruned = match pruner.pass(&engine).await {
                        Ok(n) => {
                            if n > 0 {
                                tracing::info!(count = n, "pruned finished tasks");
                            }
                            n
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "pruning failed");
                            0
                        }
                    };
                    next_prune = Instant::now() + pruner.wait_after(pruned);
                }
            };
            if tokio::time::timeout_at(until, duties).await.is_err() {
                tracing::warn!("the leader's duties outlasted its leadership; stopped");
            }
            wake_at = wake_at.min(next_rescue).min(next_prune).min(until);
        }
        tokio::select! {
            _ = &mut leases_changed, if !step.leader => elector.try_now(Instant::now()),
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = shutdown.changed() => {}
        }
    }
    presence.stopping = true;
    engine.beat(&presence).await;
    elector.resign(&engine).await;
}

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

/// What the units' tests share: engines on one SQLite file, with one manual clock.
#[cfg(test)]
pub(crate) mod test_env {
    use std::sync::Arc;

    use sked_core::{ManualClock, NewTask, Task};
    use sked_store::{FinishOutcome, Store};

    use crate::{ClaimRequest, Engine, EngineConfig};

    pub(crate) struct Env {
        pub(crate) store: Arc<dyn Store>,
        pub(crate) clock: ManualClock,
        _dir: tempfile::TempDir,
    }

    impl Env {
        pub(crate) fn new() -> Env {
            let dir = tempfile::tempdir().unwrap();
            let store = sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap();
            Env {
                store: Arc::new(store),
                clock: ManualClock::new("2026-03-01T00:00:30Z".parse().unwrap()),
                _dir: dir,
            }
        }

        /// A node on the shared store and clock.
        pub(crate) fn node(&self, id: &str) -> Engine {
            let config = EngineConfig::default().node_id(id);
            Engine::with_clock(self.store.clone(), Arc::new(self.clock.clone()), config)
        }

        pub(crate) fn advance_secs(&self, secs: i64) {
            self.clock.advance(jiff::SignedDuration::from_secs(secs));
        }
    }

    /// Enqueues `n` tasks and claims them all.
    pub(crate) async fn claimed(engine: &Engine, n: usize) -> Vec<Task> {
        for _ in 0..n {
            engine.enqueue(NewTask::new("k")).await.unwrap();
        }
        let tasks = engine
            .claim(ClaimRequest {
                worker: "w".into(),
                max: n as u32,
                ..ClaimRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(tasks.len(), n);
        tasks
    }

    /// Enqueues, claims and completes `n` tasks.
    pub(crate) async fn succeeded(engine: &Engine, n: usize) {
        for t in claimed(engine, n).await {
            engine
                .finish(t.id, t.attempt, FinishOutcome::Succeeded { result: None })
                .await
                .unwrap();
        }
    }
}
