//! The rescuer: gives back running tasks whose lease expired (their worker died or lost
//! touch), so they run again; out of attempts they are dead, with a cancel requested they are
//! cancelled. The old worker's attempt number is fenced off. Each pass also ends `expired` the
//! tasks not started by their deadline (claims never take them meanwhile).

use std::time::Duration;

use jiff::SignedDuration;
use sked_core::TaskId;
use sked_store::{TaskExpireParams, TaskRescueParams};

use crate::{Engine, Result};

/// Settings of the rescuer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RescuerConfig {
    /// How often expired leases are looked for.
    pub interval: SignedDuration,
    /// Tasks rescued in one pass at most.
    pub batch: u32,
}

impl RescuerConfig {
    /// A tenth of the task lease, between 250 ms and 3 s: a task whose worker died waits at
    /// most a lease and a tenth, longer only while the database is slow to answer a pass
    /// ([`Rescuer::wait_after`]).
    pub fn for_lease_ttl(lease_ttl: SignedDuration) -> RescuerConfig {
        RescuerConfig {
            interval: (lease_ttl / 10).clamp(
                SignedDuration::from_millis(250),
                SignedDuration::from_secs(3),
            ),
            batch: 1000,
        }
    }
}

impl Default for RescuerConfig {
    fn default() -> RescuerConfig {
        RescuerConfig::for_lease_ttl(SignedDuration::from_secs(30))
    }
}

/// Rescue passes take at most this share of the leader's time (1/20), however slow the
/// database is to answer them.
const PASS_SHARE: u32 = 20;

/// Rescues expired leases.
#[derive(Debug, Clone, Default)]
pub struct Rescuer {
    config: RescuerConfig,
}

impl Rescuer {
    /// A rescuer with these settings.
    pub fn new(config: RescuerConfig) -> Rescuer {
        Rescuer { config }
    }

    /// Its settings.
    pub fn config(&self) -> &RescuerConfig {
        &self.config
    }

    /// How long to wait before the next pass after one that rescued `rescued` tasks and took
    /// `took`: none after a full batch (more may have expired: a fleet of workers that died
    /// with many tasks held), the interval otherwise, or longer when the pass itself was slow,
    /// so that passes take at most a twentieth of the time.
    ///
    /// A pass that finds nothing is one read of the running tasks, well under a millisecond.
    /// While a snapshot is held on PostgreSQL (a long report, a session left idle in a
    /// transaction), that read passes every task that ran since, which vacuum cannot remove
    /// yet: a quarter of a second every 3 s after half an hour at 1,000 tasks a second, and
    /// longer the longer it is held. Paced, it stays a twentieth of one connection's time;
    /// an expired lease then waits for the next pass a little longer than the interval.
    pub fn wait_after(&self, rescued: usize, took: Duration) -> Duration {
        if rescued >= self.config.batch as usize {
            return Duration::ZERO;
        }
        let interval = Duration::try_from(self.config.interval).unwrap_or(Duration::ZERO);
        interval.max(took.saturating_mul(PASS_SHARE))
    }

    /// Re-queues tasks whose lease expired by the engine's `now`, and ends `expired` those
    /// not started by their deadline; says which. Leader-only in normal operation.
    pub async fn pass(&self, engine: &Engine) -> Result<Pass> {
        let now = engine.now();
        let limit = self.config.batch;
        let rescued = (engine.store())
            .task_rescue(TaskRescueParams { now, limit })
            .await?;
        if !rescued.is_empty() {
            engine.metrics().rescued(rescued.len());
            tracing::info!(count = rescued.len(), "rescued tasks with expired leases");
        }
        let expired = (engine.store())
            .task_expire(TaskExpireParams { now, limit })
            .await?;
        if !expired.is_empty() {
            engine.metrics().expired(expired.len());
            tracing::info!(count = expired.len(), "tasks expired before they started");
        }
        if !rescued.is_empty() || !expired.is_empty() {
            engine.wake_workers();
            engine.schedules_changed().notify_waiters();
        }
        Ok(Pass { rescued, expired })
    }
}

/// What a rescuer's pass changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Running tasks whose lease expired, given back (or ended).
    pub rescued: Vec<TaskId>,
    /// Tasks not started by their deadline, ended `expired`.
    pub expired: Vec<TaskId>,
}

impl Pass {
    /// The most tasks either part changed: a full batch means more may be due at once.
    pub fn most(&self) -> usize {
        self.rescued.len().max(self.expired.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maintenance::test_env::{Env, claimed};

    #[test]
    fn the_interval_follows_the_lease() {
        let of = |ms| RescuerConfig::for_lease_ttl(SignedDuration::from_millis(ms)).interval;
        assert_eq!(of(30_000), SignedDuration::from_secs(3));
        assert_eq!(of(5_000), SignedDuration::from_millis(500));
        assert_eq!(of(1_000), SignedDuration::from_millis(250));
        assert_eq!(of(600_000), SignedDuration::from_secs(3));
    }

    #[test]
    fn a_full_batch_is_followed_at_once_and_slow_passes_are_spaced_out() {
        let rescuer = Rescuer::new(RescuerConfig {
            batch: 100,
            ..RescuerConfig::default()
        });
        let interval = Duration::from_secs(3);
        let quick = Duration::from_micros(300);
        assert_eq!(rescuer.wait_after(100, quick), Duration::ZERO);
        assert_eq!(
            rescuer.wait_after(100, Duration::from_secs(1)),
            Duration::ZERO
        );
        assert_eq!(rescuer.wait_after(99, quick), interval);
        assert_eq!(rescuer.wait_after(0, quick), interval);
        // 150 ms is a twentieth of the interval: still the interval.
        assert_eq!(rescuer.wait_after(0, Duration::from_millis(150)), interval);
        assert_eq!(
            rescuer.wait_after(0, Duration::from_millis(400)),
            Duration::from_secs(8)
        );
        assert_eq!(
            rescuer.wait_after(5, Duration::from_millis(400)),
            Duration::from_secs(8)
        );
    }

    #[tokio::test]
    async fn expired_leases_are_rescued_a_batch_at_a_time() {
        let env = Env::new();
        let node = env.node("a");
        let tasks = claimed(&node, 3).await;
        let rescuer = Rescuer::new(RescuerConfig {
            batch: 2,
            ..RescuerConfig::default()
        });
        env.advance_secs(29);
        assert!(
            rescuer.pass(&node).await.unwrap().rescued.is_empty(),
            "leases hold"
        );
        env.advance_secs(2);
        let first = rescuer.pass(&node).await.unwrap();
        assert_eq!(first.rescued.len(), 2, "one batch");
        let second = rescuer.pass(&node).await.unwrap();
        assert_eq!(second.rescued.len(), 1);
        assert!(rescuer.pass(&node).await.unwrap().rescued.is_empty());
        for t in tasks {
            let now = node.task(t.id).await.unwrap();
            assert_eq!(now.state, sked_core::TaskState::Available);
            assert_eq!(
                now.attempts.last().map(|a| a.outcome.as_str()),
                Some("rescued")
            );
        }
    }
}
