//! The pruner: deletes finished tasks (and their ledger lines) older than the retention
//! period, a batch per pass, and forgets workers and nodes long gone.

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

/// Deletes old finished tasks.
#[derive(Debug, Clone, Default)]
pub struct Pruner {
    config: PrunerConfig,
}

impl Pruner {
    /// A pruner with these settings.
    pub fn new(config: PrunerConfig) -> Pruner {
        Pruner { config }
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
        if let Ok(cut) = engine.now().checked_sub(self.config.forget_workers_after) {
            engine.store().worker_prune(cut).await?;
        }
        let cutoff = engine
            .now()
            .checked_sub(self.config.retention)
            .unwrap_or(Timestamp::MIN);
        Ok(engine
            .store()
            .task_prune(TaskPruneParams {
                finished_before: cutoff,
                limit: self.config.batch,
            })
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use sked_store::WorkerInfo;

    use super::*;
    use crate::Presence;
    use crate::maintenance::test_env::{Env, succeeded};

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
