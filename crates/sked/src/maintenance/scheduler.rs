//! The scheduler: plans every schedule whose time to be looked at has come, in batches. Due
//! occurrences become tasks or ledger lines (through the schedule's overlap and catch-up
//! policies), and occurrences within the look-ahead become tasks before their time, due at
//! it, so that an occurrence's second costs only what making a task due costs.
//!
//! Every node runs it: on PostgreSQL each pass claims its schedules with `SKIP LOCKED`, so the
//! nodes share the work. Nodes overlapping anyway cannot run an occurrence twice: the store
//! records each occurrence at most once (the ledger's primary key).

use std::time::Duration;

use jiff::SignedDuration;
use sked_core::TaskId;
use sked_store::ScheduleMaterialiseParams;

use super::to_std;
use crate::{Engine, Result};

/// Settings of the scheduler.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// An occurrence less late than this is on time; older ones are "missed" and go through
    /// the catch-up policy.
    pub misfire_grace: SignedDuration,
    /// How far ahead occurrences become tasks (at most an hour). Zero, the default of the
    /// scheduler alone, makes each occurrence a task only once it is due; a node's
    /// maintenance ([`super::MaintenanceConfig`]) looks [`DEFAULT_LOOK_AHEAD`] ahead.
    pub look_ahead: SignedDuration,
    /// How often schedules are looked at with nothing due, in case a change was missed, while
    /// the store announces changes.
    pub look_every_announced: Duration,
    /// The same while it does not (SQLite shared by several processes, a listener down).
    pub look_every_unannounced: Duration,
    /// Schedules planned in one transaction at most.
    pub batch: u32,
    /// The most recent due occurrences of a schedule planned one by one when it catches up
    /// (with catch-up `all`, the most tasks one catch-up enqueues); older ones are recorded as
    /// missed in one ledger line.
    pub catchup_limit: usize,
    /// A pass ends once it has enqueued this many tasks; schedules still due are handled by
    /// the next pass, which starts at once.
    pub max_enqueued_per_pass: usize,
}

/// The look-ahead of a node's scheduler unless set otherwise.
pub const DEFAULT_LOOK_AHEAD: SignedDuration = SignedDuration::from_secs(60);

impl Default for SchedulerConfig {
    fn default() -> SchedulerConfig {
        SchedulerConfig {
            misfire_grace: SignedDuration::from_secs(10),
            look_ahead: SignedDuration::ZERO,
            look_every_announced: Duration::from_secs(30),
            look_every_unannounced: Duration::from_secs(5),
            batch: 1000,
            catchup_limit: sked_core::DEFAULT_CATCHUP_LIMIT,
            max_enqueued_per_pass: 100_000,
        }
    }
}

/// Transactions of one pass at most, so that a node shutting down or stepping down waits for
/// no more; a pass that leaves schedules due is followed at once by another.
const BATCHES_PER_PASS: usize = 10;

/// Materialises schedules.
#[derive(Debug, Clone, Default)]
pub struct Scheduler {
    config: SchedulerConfig,
}

/// What a pass did.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// The tasks made.
    pub enqueued: Vec<TaskId>,
    /// It stopped with schedules still to plan now.
    pub more: bool,
}

impl Scheduler {
    /// A scheduler with these settings.
    pub fn new(config: SchedulerConfig) -> Scheduler {
        Scheduler { config }
    }

    /// One pass at the engine's `now`: every schedule whose time to be looked at has come is
    /// planned, in batches of [`SchedulerConfig::batch`]. Returns the ids of the tasks made.
    /// Safe on any number of nodes at once.
    pub async fn pass(&self, engine: &Engine) -> Result<Vec<TaskId>> {
        Ok(self.pass_once(engine).await?.enqueued)
    }

    /// [`Scheduler::pass`], saying whether schedules are left to plan now.
    pub async fn pass_once(&self, engine: &Engine) -> Result<Pass> {
        let mut pass = Pass::default();
        let mut runs_ended = engine.take_runs_ended();
        for _ in 0..BATCHES_PER_PASS {
            let report = engine
                .store()
                .schedule_materialise(ScheduleMaterialiseParams {
                    now: engine.now(),
                    horizon: self.config.look_ahead,
                    limit: self.config.batch.max(1),
                    max_enqueued: self
                        .config
                        .max_enqueued_per_pass
                        .saturating_sub(pass.enqueued.len())
                        .max(1),
                    misfire_grace: self.config.misfire_grace,
                    catchup_limit: self.config.catchup_limit,
                    runs_ended: std::mem::take(&mut runs_ended),
                })
                .await?;
            for (name, dead_runs) in &report.paused {
                tracing::warn!(schedule = %name, dead_runs, "schedule paused itself: its last runs in a row ended dead");
            }
            for (name, why) in &report.invalid {
                tracing::warn!(schedule = %name, error = %why, "schedule cannot be evaluated");
            }
            for o in &report.outcomes {
                engine.metrics().occurrence(o.as_str());
            }
            for (queue, id) in report.enqueued {
                engine.metrics().enqueued(&queue, 1);
                pass.enqueued.push(id);
            }
            pass.more = report.more;
            if !report.more || pass.enqueued.len() >= self.config.max_enqueued_per_pass {
                break;
            }
        }
        if !pass.enqueued.is_empty() {
            engine.wake_workers();
        }
        Ok(pass)
    }

    /// A pass, then how long until schedules need looking at again: the earliest time one
    /// must be planned, or the safety interval, whichever comes first (at once when the pass
    /// left some; a second after a failure).
    pub async fn pass_and_plan(&self, engine: &Engine) -> Duration {
        let safety = if engine.announced() {
            self.config.look_every_announced
        } else {
            self.config.look_every_unannounced
        };
        match self.pass_once(engine).await {
            Ok(pass) if pass.more => return Duration::ZERO,
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "materialising schedules failed");
                return Duration::from_secs(1);
            }
        }
        match engine.store().schedule_next_look_at().await {
            Ok(Some(at)) => safety.min(to_std(at.duration_since(engine.now()))),
            Ok(None) => safety,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read when schedules need planning");
                Duration::from_secs(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use sked_core::{CatchupPolicy, OccurrenceOutcome, ScheduleDef, TaskTemplate};

    use super::*;
    use crate::maintenance::test_env::Env;

    fn every_minute(catchup: CatchupPolicy) -> ScheduleDef {
        ScheduleDef::new("m", "* * * * *", TaskTemplate::new("k"))
            .catchup(catchup, SignedDuration::from_hours(1))
    }

    #[tokio::test]
    async fn a_pass_makes_what_comes_within_the_look_ahead_once() {
        let env = Env::new();
        let node = env.node("a");
        node.schedule_put(every_minute(CatchupPolicy::Latest))
            .await
            .unwrap();
        let scheduler = Scheduler::new(SchedulerConfig {
            look_ahead: SignedDuration::from_secs(40),
            look_every_unannounced: Duration::from_secs(60),
            ..SchedulerConfig::default()
        });
        // 00:00:30: 00:01:00 is within 40 s, made ahead, due at its time.
        let made = scheduler.pass(&node).await.unwrap();
        assert_eq!(made.len(), 1);
        let task = node.store().task_get(made[0]).await.unwrap();
        assert_eq!(task.run_at, "2026-03-01T00:01:00Z".parse().unwrap());
        assert_eq!(task.state, sked_core::TaskState::Scheduled);
        assert!(scheduler.pass(&node).await.unwrap().is_empty());
        // 00:02:00 comes within 40 s at 00:01:20, but one run at a time is made ahead: the
        // next once 00:01:00 is due, half-way to 00:02:00.
        assert_eq!(
            scheduler.pass_and_plan(&node).await,
            Duration::from_secs(60)
        );
        let s = node.store().schedule_get("m").await.unwrap();
        assert_eq!(
            s.next_fire_at,
            Some("2026-03-01T00:01:00Z".parse().unwrap()),
            "the next fire time is the run made ahead"
        );
    }

    #[tokio::test]
    async fn a_pass_enqueues_what_is_due_once_and_plans_the_next_look() {
        let env = Env::new();
        let node = env.node("a");
        node.schedule_put(every_minute(CatchupPolicy::Latest))
            .await
            .unwrap();
        let scheduler = Scheduler::new(SchedulerConfig {
            look_ahead: SignedDuration::ZERO,
            look_every_unannounced: Duration::from_secs(60),
            ..SchedulerConfig::default()
        });
        // 00:00:30: the first occurrence is 30 s away, sooner than the safety interval.
        assert!(scheduler.pass(&node).await.unwrap().is_empty());
        assert_eq!(
            scheduler.pass_and_plan(&node).await,
            Duration::from_secs(30)
        );
        env.advance_secs(30);
        assert_eq!(scheduler.pass(&node).await.unwrap().len(), 1);
        assert!(
            scheduler.pass(&node).await.unwrap().is_empty(),
            "an occurrence is enqueued once"
        );
        // Without a schedule, the safety interval; SQLite announces nothing, so the
        // unannounced one.
        node.schedule_delete("m").await.unwrap();
        assert_eq!(
            scheduler.pass_and_plan(&node).await,
            Duration::from_secs(60)
        );
    }

    #[tokio::test]
    async fn the_misfire_grace_decides_what_counts_as_missed() {
        for (grace, expected) in [
            (20, OccurrenceOutcome::Enqueued),
            (10, OccurrenceOutcome::Missed),
        ] {
            let env = Env::new();
            let node = env.node("a");
            node.schedule_put(every_minute(CatchupPolicy::None))
                .await
                .unwrap();
            let scheduler = Scheduler::new(SchedulerConfig {
                misfire_grace: SignedDuration::from_secs(grace),
                look_ahead: SignedDuration::ZERO,
                ..SchedulerConfig::default()
            });
            // 15 s late for the 00:01 occurrence.
            env.advance_secs(45);
            let enqueued = scheduler.pass(&node).await.unwrap();
            let ledger = node.occurrences("m", 10).await.unwrap();
            assert_eq!(ledger.len(), 1, "grace {grace}s: {ledger:?}");
            assert_eq!(ledger[0].outcome, expected, "grace {grace}s");
            assert_eq!(
                enqueued.len(),
                usize::from(expected == OccurrenceOutcome::Enqueued)
            );
        }
    }
}
