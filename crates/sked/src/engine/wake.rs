//! Wake-ups: who is told when work may have appeared, schedules changed or a lease was given
//! up, from this node's own changes and the store's announcements of other nodes' changes;
//! the work counter remote workers wait on; and the next-due hint that lets an idle worker
//! sleep until a task is due instead of asking the store.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jiff::Timestamp;
use sked_store::StoreEvent;
use tokio::sync::Notify;

use super::{Engine, Inner, lock};
use crate::Result;

/// How often a waiting claim looks again when nothing tells it of new work: rarely while the
/// store announces changes, every second while it does not (or cannot).
pub(super) const POLL_ANNOUNCED: Duration = Duration::from_secs(30);
pub(super) const POLL_UNANNOUNCED: Duration = Duration::from_secs(1);

/// The most schedules remembered between two looks of the scheduler as having had a run end.
const RUNS_ENDED_MAX: usize = 100_000;

/// The earliest run time of a scheduled or retrying task, kept up to date from this node's
/// own changes and the store's announcements, so that idle workers need not ask the store.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DueHint {
    known: bool,
    at: Option<Timestamp>,
    /// What was seen since the last look at the store began (it may not have seen it).
    seen: Option<Timestamp>,
    seen_unknown: bool,
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl DueHint {
    fn saw(&mut self, run_at: Option<Timestamp>) {
        match run_at {
            Some(_) => {
                if self.known {
                    self.at = earliest(self.at, run_at);
                }
                self.seen = earliest(self.seen, run_at);
            }
            None => {
                self.known = false;
                self.seen_unknown = true;
            }
        }
    }
}

impl Engine {
    /// Whether changes made by other nodes are announced (so idle loops need not poll).
    pub fn announced(&self) -> bool {
        self.inner.announced.load(Ordering::Relaxed)
    }

    pub(crate) fn schedules_changed(&self) -> &Notify {
        &self.inner.schedules_changed
    }

    /// A run of `schedule` ended here: the scheduler is woken, and told which schedule.
    pub(crate) fn run_ended(&self, schedule: &str) {
        {
            let mut ended = lock(&self.inner.runs_ended);
            // A hint only: past this many, the schedules are planned when their time comes.
            if ended.len() < RUNS_ENDED_MAX && !ended.contains(schedule) {
                ended.insert(schedule.to_string());
            }
        }
        self.inner.schedules_changed.notify_waiters();
    }

    /// The schedules a run of which ended here since the last call.
    pub(crate) fn take_runs_ended(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.inner.runs_ended))
            .into_iter()
            .collect()
    }

    pub(crate) fn leases_changed(&self) -> &Notify {
        &self.inner.leases_changed
    }

    pub(crate) fn wake_workers(&self) {
        self.inner.wake_workers();
    }

    /// A counter that grows whenever tasks may have become claimable here: enqueues and
    /// retries on this node, and other nodes' announced changes.
    pub fn work_epoch(&self) -> u64 {
        self.inner.work_epoch.load(Ordering::Acquire)
    }

    /// Waits until [`Engine::work_epoch`] passes `after`, or `timeout`; returns the epoch.
    /// Without announcements from other processes, it returns after at most a second, so the
    /// caller looks (polls) anyway. Dropping it is harmless.
    pub async fn work_changed(&self, after: u64, timeout: Duration) -> u64 {
        let woken = self.inner.tasks_changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let now = self.work_epoch();
        if now > after {
            return now;
        }
        let timeout = if self.announced() {
            timeout
        } else {
            timeout.min(POLL_UNANNOUNCED)
        };
        let _ = tokio::time::timeout(timeout, woken).await;
        self.work_epoch()
    }

    /// Registers for the next wake-up of workers, before looking for work, so that a change
    /// in between is not missed.
    pub(super) fn tasks_changed(&self) -> &Notify {
        &self.inner.tasks_changed
    }

    /// Notes tasks that will wait until `run_at` (`None`: unknown, ask the store).
    pub(super) fn saw_waiting(&self, run_at: Option<Timestamp>) {
        lock(&self.inner.next_due).saw(run_at);
    }

    /// When the next waiting task is due, or a rate limit lets held-back tasks start: from
    /// what this node knows, or from the store.
    pub(super) async fn next_due(&self) -> Result<Option<Timestamp>> {
        let now = self.now();
        let held = self.inner.store.task_held_until(now);
        {
            let mut hint = lock(&self.inner.next_due);
            if hint.known && self.announced() && hint.at.is_none_or(|t| t > now) {
                return Ok(earliest(hint.at, held));
            }
            hint.seen = None;
            hint.seen_unknown = false;
        }
        let stored = self.inner.store.task_next_run_at().await?;
        // What was announced while the store was asked may not be in its answer.
        let mut hint = lock(&self.inner.next_due);
        hint.at = earliest(stored, hint.seen);
        hint.known = !hint.seen_unknown;
        Ok(earliest(hint.at, held))
    }
}

impl Inner {
    fn wake_workers(&self) {
        self.work_epoch.fetch_add(1, Ordering::AcqRel);
        self.tasks_changed.notify_waiters();
    }
}

/// Turns the store's announcements into this engine's wake-ups, until the engine is dropped.
pub(super) async fn follow_announcements(
    inner: Weak<Inner>,
    mut events: tokio::sync::broadcast::Receiver<StoreEvent>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let event = events.recv().await;
        let Some(inner) = inner.upgrade() else { return };
        match event {
            Ok(StoreEvent::Tasks { run_at }) => {
                let now = inner.clock.now();
                if run_at.is_some_and(|t| t > now) {
                    lock(&inner.next_due).saw(run_at);
                }
                inner.wake_workers();
            }
            Ok(StoreEvent::Room) => inner.wake_workers(),
            Ok(StoreEvent::Schedules) => inner.schedules_changed.notify_waiters(),
            Ok(StoreEvent::LeaseReleased { .. }) => inner.leases_changed.notify_waiters(),
            Ok(StoreEvent::Listening) | Ok(StoreEvent::Deaf) | Err(RecvError::Lagged(_)) => {
                // Whatever was announced while nobody listened is unknown: look again.
                let listening = matches!(event, Ok(StoreEvent::Listening));
                inner.announced.store(listening, Ordering::Relaxed);
                lock(&inner.next_due).saw(None);
                inner.wake_workers();
                inner.schedules_changed.notify_waiters();
                inner.leases_changed.notify_waiters();
            }
            Err(RecvError::Closed) => {
                inner.announced.store(false, Ordering::Relaxed);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn due_hint_keeps_the_earliest_and_forgets_on_unknown() {
        let mut h = DueHint::default();
        h.saw(Some(t(5)));
        assert!(!h.known, "nothing is known before the store was asked");
        assert_eq!(
            h.seen,
            Some(t(5)),
            "but what was seen is kept for the next look"
        );
        h = DueHint {
            known: true,
            at: Some(t(10)),
            ..DueHint::default()
        };
        h.saw(Some(t(20)));
        assert_eq!(h.at, Some(t(10)));
        h.saw(Some(t(3)));
        assert_eq!(h.at, Some(t(3)));
        h.saw(None);
        assert!(!h.known && h.seen_unknown);
    }
}
