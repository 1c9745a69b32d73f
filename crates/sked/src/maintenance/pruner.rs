//! The pruner: deletes finished tasks (and their ledger lines) older than the retention
//! period, a batch per pass, and forgets workers and nodes long gone.
//!
//! A pass after a complete one (one that found every task due then) looks only at what
//! finished since that pass's cutoff, less [`LATE_FINISH`]; a full pass, which looks at every
//! finished task, runs first and at least every [`FULL_PASS_EVERY`]. On PostgreSQL a held
//! snapshot (a long report, a forgotten `BEGIN`) keeps every deleted task in the index of
//! finished tasks until it ends: a full pass visits the rows of all of them each time, a
//! bounded one steps over their entries inside the index.

use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_store::TaskPruneParams;

use crate::{Engine, Result};

/// Settings of the pruner.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PrunerConfig {
    /// How long finished tasks are kept.
    pub retention: SignedDuration,
    /// How often the pruner runs.
    pub interval: Duration,
    /// Tasks deleted in one pass at most (one short transaction).
    pub batch: u32,
    /// Workers and nodes not seen for this long are forgotten.
    pub forget_workers_after: SignedDuration,
}

impl Default for PrunerConfig {
    fn default() -> PrunerConfig {
        PrunerConfig {
            retention: SignedDuration::from_hours(24 * 7),
            interval: Duration::from_secs(60),
            batch: 10_000,
            forget_workers_after: SignedDuration::from_hours(24 * 7),
        }
    }
}

/// How often a full pass runs at the least. It finds the tasks a bounded pass does not see:
/// those that finished more than [`LATE_FINISH`] before the previous complete pass's cutoff
/// but were written after it (a slow commit, another node's clock), and those kept past the
/// retention for their dedup window.
const FULL_PASS_EVERY: SignedDuration = SignedDuration::from_mins(10);

/// How far before the last complete pass's cutoff a bounded pass looks: room for finish times
/// written late, or by a node whose clock is behind the leader's.
const LATE_FINISH: SignedDuration = SignedDuration::from_mins(1);

/// Where the last complete pass left off.
#[derive(Debug, Clone)]
struct Complete {
    /// Every task finished before this (out of its dedup window) was deleted.
    before: Timestamp,
    /// When the last full pass ran.
    full_at: Timestamp,
}

/// Deletes old finished tasks.
#[derive(Debug, Default)]
pub struct Pruner {
    config: PrunerConfig,
    complete: Mutex<Option<Complete>>,
}

impl Pruner {
    /// A pruner with these settings.
    pub fn new(config: PrunerConfig) -> Pruner {
        Pruner {
            config,
            complete: Mutex::new(None),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &PrunerConfig {
        &self.config
    }

    /// How long to wait before the next pass after one that deleted `deleted` tasks: none
    /// after a full batch (more are due: under a steady load above a batch per interval the
    /// table would otherwise grow without bound), the interval otherwise.
    pub fn wait_after(&self, deleted: u64) -> Duration {
        if deleted >= u64::from(self.config.batch) {
            Duration::ZERO
        } else {
            self.config.interval
        }
    }

    /// Deletes up to a batch of tasks finished longer than the retention before the engine's
    /// `now`, and forgets workers gone long enough. Returns how many tasks were deleted.
    /// Leader-only in normal operation.
    pub async fn pass(&self, engine: &Engine) -> Result<u64> {
        let now = engine.now();
        if let Ok(cut) = now.checked_sub(self.config.forget_workers_after) {
            engine.store().worker_prune(cut).await?;
        }
        let cutoff = now
            .checked_sub(self.config.retention)
            .unwrap_or(Timestamp::MIN);
        let last = self.complete.lock().expect("not poisoned").clone();
        let (finished_since, full_at) = match last {
            Some(c) if now.duration_since(c.full_at) < FULL_PASS_EVERY => {
                let since = c.before.checked_sub(LATE_FINISH).unwrap_or(Timestamp::MIN);
                (Some(since), c.full_at)
            }
            _ => (None, now),
        };
        let deleted = engine
            .store()
            .task_prune(TaskPruneParams {
                finished_before: cutoff,
                now,
                limit: self.config.batch,
                finished_since,
            })
            .await?;
        if deleted < u64::from(self.config.batch) {
            *self.complete.lock().expect("not poisoned") = Some(Complete {
                before: cutoff,
                full_at,
            });
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use sked_store::WorkerInfo;

    use super::*;
    use crate::Presence;
    use crate::maintenance::test_env::{Env, claimed, succeeded};

    #[test]
    fn a_full_batch_is_followed_at_once_by_another_pass() {
        let pruner = Pruner::new(PrunerConfig {
            batch: 100,
            ..PrunerConfig::default()
        });
        assert_eq!(pruner.wait_after(100), Duration::ZERO);
        assert_eq!(pruner.wait_after(99), pruner.config().interval);
        assert_eq!(pruner.wait_after(0), pruner.config().interval);
    }

    #[tokio::test]
    async fn old_finished_tasks_go_a_batch_at_a_time_and_recent_ones_stay() {
        let env = Env::new();
        let node = env.node("a");
        succeeded(&node, 3).await;
        node.beat(&Presence {
            id: "gone".into(),
            role: "worker".into(),
            ..Presence::default()
        })
        .await;
        env.advance_secs(8 * 24 * 3600);
        succeeded(&node, 1).await;
        let pruner = Pruner::new(PrunerConfig {
            batch: 2,
            ..PrunerConfig::default()
        });
        assert_eq!(pruner.pass(&node).await.unwrap(), 2);
        assert_eq!(pruner.pass(&node).await.unwrap(), 1);
        assert_eq!(pruner.pass(&node).await.unwrap(), 0);
        let left = node.tasks(crate::TaskFilter::new()).await.unwrap();
        assert_eq!(left.len(), 1, "the task finished today stays");
        let workers: Vec<WorkerInfo> = node
            .store()
            .worker_list(sked_store::WorkerListParams {
                seen_since: Timestamp::MIN,
                limit: 100,
            })
            .await
            .unwrap()
            .items;
        assert!(
            workers.iter().all(|w| w.id != "gone"),
            "a worker gone for a week is forgotten"
        );
    }

    /// Ends `task` as if its node's clock read `at`.
    async fn succeed_at(env: &Env, task: &sked_core::Task, at: Timestamp) {
        let end = sked_store::TaskFinishParams {
            id: task.id,
            attempt: task.attempt,
            outcome: sked_store::FinishOutcome::Succeeded { result: None },
            now: at,
            jitter: 0.5,
        };
        env.store.task_finish_many(vec![end]).await.unwrap()[0]
            .as_ref()
            .unwrap();
    }

    fn an_hours_retention() -> Pruner {
        Pruner::new(PrunerConfig {
            retention: SignedDuration::from_hours(1),
            ..PrunerConfig::default()
        })
    }

    #[tokio::test]
    async fn after_a_complete_pass_the_next_reads_from_its_cutoff_until_a_full_one_is_due() {
        let env = Env::new();
        let node = env.node("a");
        let pruner = an_hours_retention();
        succeeded(&node, 1).await;
        env.advance_secs(2 * 3600);
        assert_eq!(
            pruner.pass(&node).await.unwrap(),
            1,
            "the first pass is full"
        );
        let cutoff = node.now() - SignedDuration::from_hours(1);
        let [long_late, late]: [sked_core::Task; 2] = claimed(&node, 2).await.try_into().unwrap();
        succeed_at(
            &env,
            &long_late,
            cutoff - LATE_FINISH - SignedDuration::from_secs(1),
        )
        .await;
        succeed_at(&env, &late, cutoff - LATE_FINISH).await;
        env.advance_secs(60);
        assert_eq!(
            pruner.pass(&node).await.unwrap(),
            1,
            "a bounded pass sees what ended up to a minute before the last cutoff"
        );
        env.advance_secs(FULL_PASS_EVERY.as_secs() - 61);
        assert_eq!(pruner.pass(&node).await.unwrap(), 0, "still bounded");
        env.advance_secs(1);
        assert_eq!(pruner.pass(&node).await.unwrap(), 1, "the full pass");
    }

    #[tokio::test]
    async fn a_bounded_pass_finds_a_queue_new_since_the_full_one() {
        let env = Env::new();
        let node = env.node("a");
        let pruner = an_hours_retention();
        env.advance_secs(2 * 3600);
        assert_eq!(
            pruner.pass(&node).await.unwrap(),
            0,
            "full, and nothing yet"
        );
        let cutoff = node.now() - SignedDuration::from_hours(1);
        let [task]: [sked_core::Task; 1] = claimed(&node, 1).await.try_into().unwrap();
        succeed_at(&env, &task, cutoff + SignedDuration::from_secs(10)).await;
        env.advance_secs(60);
        assert_eq!(pruner.pass(&node).await.unwrap(), 1, "bounded, and found");
    }

    #[tokio::test]
    async fn the_bound_moves_only_after_a_pass_that_found_everything() {
        let env = Env::new();
        let node = env.node("a");
        let pruner = Pruner::new(PrunerConfig {
            batch: 2,
            ..an_hours_retention().config().clone()
        });
        succeeded(&node, 3).await;
        env.advance_secs(2 * 3600);
        assert_eq!(pruner.pass(&node).await.unwrap(), 2, "full, not complete");
        // Had the incomplete pass set the bound, this pass would look after its cutoff.
        assert_eq!(pruner.pass(&node).await.unwrap(), 1, "full again");
    }

    #[tokio::test]
    async fn the_retention_is_the_pruners_setting() {
        let env = Env::new();
        let node = env.node("a");
        succeeded(&node, 2).await;
        env.advance_secs(3 * 3600);
        let keep_a_day = Pruner::new(PrunerConfig {
            retention: SignedDuration::from_hours(24),
            ..PrunerConfig::default()
        });
        assert_eq!(keep_a_day.pass(&node).await.unwrap(), 0);
        let keep_an_hour = Pruner::new(PrunerConfig {
            retention: SignedDuration::from_hours(1),
            ..PrunerConfig::default()
        });
        assert_eq!(keep_an_hour.pass(&node).await.unwrap(), 2);
    }
}
