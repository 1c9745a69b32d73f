//! The scheduler: turns every due occurrence of every schedule into a task or a ledger line
//! (through the schedule's overlap and catch-up policies), and says when to look again.
//!
//! Leaders overlapping anyway (a stalled process, say) cannot run an occurrence twice: the
//! store applies each plan at most once (a unique key per occurrence, and a compare-and-set on
//! the schedule's next fire time).

use std::time::Duration;

use jiff::SignedDuration;
use sked_core::{LastRun, PlanInput, TaskId};
use sked_store::{
    DueSchedule, ErrorKind, ScheduleApplyParams, ScheduleDueParams, SchedulePauseParams,
};

use super::to_std;
use crate::{Engine, Result};

/// Settings of the scheduler.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SchedulerConfig {
    /// An occurrence less late than this is on time; older ones are "missed" and go through
    /// the catch-up policy.
    pub misfire_grace: SignedDuration,
    /// How often schedules are looked at with nothing due, in case a change was missed, while
    /// the store announces changes.
    pub look_every_announced: Duration,
    /// The same while it does not (SQLite shared by several processes, a listener down).
    pub look_every_unannounced: Duration,
    /// Schedules handled in one pass at most.
    pub batch: u32,
    /// The most recent due occurrences of a schedule planned one by one when it catches up
    /// (with catch-up `all`, the most tasks one catch-up enqueues); older ones are recorded as
    /// missed in one ledger line.
    pub catchup_limit: usize,
    /// A pass ends once it has enqueued this many tasks; schedules still due are handled by
    /// the next pass, so that a burst of catch-ups is spread out.
    pub max_enqueued_per_pass: usize,
}

impl Default for SchedulerConfig {
    fn default() -> SchedulerConfig {
        SchedulerConfig {
            misfire_grace: SignedDuration::from_secs(10),
            look_every_announced: Duration::from_secs(30),
            look_every_unannounced: Duration::from_secs(5),
            batch: 1000,
            catchup_limit: sked_core::DEFAULT_CATCHUP_LIMIT,
            max_enqueued_per_pass: 10_000,
        }
    }
}

/// Materialises schedules.
#[derive(Debug, Clone, Default)]
pub struct Scheduler {
    config: SchedulerConfig,
}

impl Scheduler {
    /// A scheduler with these settings.
    pub fn new(config: SchedulerConfig) -> Scheduler {
        Scheduler { config }
    }

    /// One pass at the engine's `now`: every due occurrence of every schedule becomes a task
    /// or a ledger line. Returns the ids of the tasks enqueued. Leader-only in normal
    /// operation; safe anywhere, since the store applies each plan at most once.
    pub async fn pass(&self, engine: &Engine) -> Result<Vec<TaskId>> {
        let now = engine.now();
        let due = engine
            .store()
            .schedule_due(ScheduleDueParams {
                now,
                limit: self.config.batch,
            })
            .await?;
        let mut enqueued = Vec::new();
        for DueSchedule {
            schedule: s,
            active_tasks,
            dead_runs,
        } in due
        {
            if enqueued.len() >= self.config.max_enqueued_per_pass {
                break;
            }
            if s.pause_after_failures.is_some_and(|n| dead_runs >= n) {
                self.pause_failing(engine, &s.name, dead_runs).await?;
                continue;
            }
            let (spec, tz) = match s.timing() {
                Ok(timing) => timing,
                Err(e) => {
                    tracing::warn!(schedule = %s.name, error = %e, "schedule cannot be evaluated");
                    continue;
                }
            };
            let input = PlanInput {
                name: &s.name,
                spec: &spec,
                tz: &tz,
                anchor: s.anchor_at,
                next_fire_at: s.next_fire_at,
                overlap: s.overlap,
                catchup: s.catchup,
                catchup_window: s.catchup_window,
                misfire_grace: self.config.misfire_grace,
                active_tasks: &active_tasks,
                buffered: s.buffered_at,
                catchup_limit: self.config.catchup_limit,
                from: s.from,
                jitter: s.jitter,
                last_run: LastRun {
                    started_at: s.last_started_at,
                    finished_at: s.last_finished_at,
                    running: s.running,
                },
            };
            let plan = sked_core::schedule::plan::plan(&input, now);
            let outcomes: Vec<&'static str> = plan
                .occurrences
                .iter()
                .map(|o| o.outcome.as_str())
                .collect();
            if plan.is_empty()
                && plan.next_fire_at == s.next_fire_at
                && plan.buffered == s.buffered_at
            {
                continue;
            }
            match engine
                .store()
                .schedule_apply(ScheduleApplyParams {
                    name: s.name.clone(),
                    expected_next_fire_at: s.next_fire_at,
                    plan,
                    task: s.task.clone(),
                    now,
                })
                .await
            {
                Ok(ids) => {
                    engine.metrics().enqueued(&s.task.queue, ids.len());
                    for o in outcomes {
                        engine.metrics().occurrence(o);
                    }
                    enqueued.extend(ids)
                }
                // Another node got there first: its plan stands.
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    tracing::debug!(schedule = %s.name, error = %e, "occurrence already handled")
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !enqueued.is_empty() {
            engine.wake_workers();
        }
        Ok(enqueued)
    }

    /// Pauses a schedule whose last runs ended dead, saying why, instead of running it again.
    async fn pause_failing(&self, engine: &Engine, name: &str, dead_runs: u32) -> Result<()> {
        let reason = format!("paused itself: its last {dead_runs} runs in a row ended dead");
        tracing::warn!(schedule = %name, dead_runs, "{reason}");
        match engine
            .store()
            .schedule_set_paused(SchedulePauseParams {
                name: name.to_string(),
                paused: true,
                reason: Some(reason),
                next_fire_at: None,
                now: engine.now(),
            })
            .await
        {
            Ok(_) => Ok(()),
            // Deleted meanwhile: nothing to pause.
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// A pass, then how long until schedules need looking at again: the next fire time, or
    /// the safety interval, whichever comes first (a second after a failure).
    pub async fn pass_and_plan(&self, engine: &Engine) -> Duration {
        let safety = if engine.announced() {
            self.config.look_every_announced
        } else {
            self.config.look_every_unannounced
        };
        if let Err(e) = self.pass(engine).await {
            tracing::warn!(error = %e, "materialising schedules failed");
            return Duration::from_secs(1);
        }
        match engine.store().schedule_next_fire_at().await {
            Ok(Some(fire)) => safety.min(to_std(fire.duration_since(engine.now()))),
            Ok(None) => safety,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the next fire time");
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
    async fn a_pass_enqueues_what_is_due_once_and_plans_the_next_look() {
        let env = Env::new();
        let node = env.node("a");
        node.schedule_put(every_minute(CatchupPolicy::Latest))
            .await
            .unwrap();
        let scheduler = Scheduler::new(SchedulerConfig {
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
