//! Waiting for a task to end: callers parked on a task's id are woken when this node ends it
//! (a worker's ending, a cancel, a rescue). What this node does not see (an end on another
//! node, a task cancelled because its parent failed) one look finds for them all: while any
//! wait is parked, the states of every task waited for are read together every
//! [`LOOK_EVERY`], so a hundred waits cost one read, not a hundred. With nobody waiting, an
//! ending pays one atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sked_core::{Task, TaskId};
use tokio::sync::Notify;

use super::{Engine, lock};
use crate::Result;

/// How often the states of the tasks waited for are read while a wait is parked.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The tasks waited for on this node, each with what wakes its waiters.
#[derive(Debug, Default)]
pub(super) struct TaskWaits {
    waited: std::sync::Mutex<HashMap<TaskId, (usize, Arc<Notify>)>>,
    /// How many waits are parked, so that an ending with none to wake looks no further.
    parked: AtomicUsize,
    /// Whether the look ([`look`]) runs.
    looking: AtomicBool,
}

impl TaskWaits {
    /// Parks a wait on `id` until the guard is dropped.
    fn park(self: &Arc<Self>, id: TaskId) -> Parked {
        let notify = {
            let mut waited = lock(&self.waited);
            let entry = waited
                .entry(id)
                .or_insert_with(|| (0, Arc::new(Notify::new())));
            entry.0 += 1;
            entry.1.clone()
        };
        self.parked.fetch_add(1, Ordering::AcqRel);
        Parked {
            waits: self.clone(),
            id,
            notify,
        }
    }

    /// Wakes the waits on `id`, if any.
    pub(super) fn ended(&self, id: TaskId) {
        if self.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some((_, notify)) = lock(&self.waited).get(&id) {
            notify.notify_waiters();
        }
    }

    /// Wakes every wait (after a change whose tasks this node does not list, as a bulk cancel).
    pub(super) fn ended_some(&self) {
        if self.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        for (_, notify) in lock(&self.waited).values() {
            notify.notify_waiters();
        }
    }
}

/// A parked wait; dropping it unparks it.
struct Parked {
    waits: Arc<TaskWaits>,
    id: TaskId,
    notify: Arc<Notify>,
}

impl Drop for Parked {
    fn drop(&mut self) {
        let mut waited = lock(&self.waits.waited);
        if let Some(entry) = waited.get_mut(&self.id) {
            entry.0 -= 1;
            if entry.0 == 0 {
                waited.remove(&self.id);
            }
        }
        self.waits.parked.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Engine {
    /// The task once it has ended (succeeded, dead or cancelled), or as it is when `wait` has
    /// passed first.
    pub async fn task_wait(&self, id: TaskId, wait: Duration) -> Result<Task> {
        let deadline = tokio::time::Instant::now() + wait;
        let parked = self.inner.task_waits.park(id);
        if !self.inner.task_waits.looking.swap(true, Ordering::AcqRel) {
            tokio::spawn(look(Arc::downgrade(&self.inner)));
        }
        loop {
            // Registered before the read, so that an end between the two is not missed.
            let woken = parked.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let task = self.task(id).await?;
            let now = tokio::time::Instant::now();
            if task.state.is_finished() || now >= deadline {
                return Ok(task);
            }
            let _ = tokio::time::timeout(deadline - now, woken).await;
        }
    }
}

/// While any wait is parked, reads the states of every task waited for, every [`LOOK_EVERY`],
/// and wakes the waits on those that ended (or are gone). Stops when no wait is left, or the
/// engine is dropped.
async fn look(inner: Weak<super::Inner>) {
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let waits = &inner.task_waits;
        let ids: Vec<TaskId> = lock(&waits.waited).keys().copied().collect();
        if ids.is_empty() {
            waits.looking.store(false, Ordering::Release);
            // A wait parked since the read above saw the look running: look on for it.
            let parked_meanwhile = !lock(&waits.waited).is_empty();
            if !parked_meanwhile || waits.looking.swap(true, Ordering::AcqRel) {
                return;
            }
            continue;
        }
        match inner.store.task_states(ids).await {
            Ok(states) => {
                for (id, state) in states {
                    if state.is_none_or(|s| s.is_finished()) {
                        waits.ended(id);
                    }
                }
            }
            // Each wait reads its task and says what went wrong.
            Err(_) => waits.ended_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_counted_and_forgotten_when_dropped() {
        let waits = Arc::new(TaskWaits::default());
        let a = waits.park(1);
        let b = waits.park(1);
        let c = waits.park(2);
        assert_eq!(waits.parked.load(Ordering::Acquire), 3);
        drop(a);
        assert!(
            lock(&waits.waited).contains_key(&1),
            "one wait on 1 is left"
        );
        drop(b);
        assert!(!lock(&waits.waited).contains_key(&1));
        drop(c);
        assert_eq!(waits.parked.load(Ordering::Acquire), 0);
        assert!(lock(&waits.waited).is_empty());
    }

    #[tokio::test]
    async fn an_end_elsewhere_is_found_by_one_look_for_every_wait() {
        use sked_store::{FinishOutcome, TaskClaimParams, TaskFinishParams};
        let dir = tempfile::tempdir().unwrap();
        let store = sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap();
        let engine = Engine::new(Arc::new(store), crate::EngineConfig::default());
        let tasks = (0..20)
            .map(|i| sked_core::NewTask::new("k").payload(serde_json::json!(i)))
            .collect();
        let inserted = engine.enqueue_many(tasks).await.unwrap();
        let ids: Vec<TaskId> = inserted.iter().map(|t| t.id).collect();
        let waits: Vec<_> = (ids.iter())
            .map(|&id| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.task_wait(id, Duration::from_secs(10)).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(engine.inner.task_waits.parked.load(Ordering::Acquire), 20);
        // Ended in the store, past this engine, as another node ends them.
        let store = engine.store().clone();
        let now = engine.now();
        let claimed = store
            .task_claim(TaskClaimParams {
                queues: vec![],
                kinds: vec![],
                max: 20,
                min_priority: None,
                worker: "elsewhere".into(),
                lease_ttl: jiff::SignedDuration::from_secs(30),
                timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
                now,
            })
            .await
            .unwrap();
        let ended = std::time::Instant::now();
        store
            .task_finish_many(
                (claimed.iter())
                    .map(|t| TaskFinishParams {
                        id: t.id,
                        attempt: t.attempt,
                        outcome: FinishOutcome::Succeeded { result: None },
                        now,
                        jitter: 0.5,
                    })
                    .collect(),
            )
            .await
            .unwrap();
        for w in waits {
            let task = w.await.unwrap().unwrap();
            assert_eq!(task.state, sked_core::TaskState::Succeeded);
        }
        assert!(
            ended.elapsed() < LOOK_EVERY * 3,
            "seen by the look within about {LOOK_EVERY:?}: {:?}",
            ended.elapsed()
        );
        // With no wait left, the look stops.
        tokio::time::sleep(LOOK_EVERY * 2).await;
        assert!(!engine.inner.task_waits.looking.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn an_end_wakes_the_waits_on_that_task_only() {
        let waits = Arc::new(TaskWaits::default());
        let one = waits.park(1);
        let two = waits.park(2);
        let (w1, w2) = (one.notify.notified(), two.notify.notified());
        tokio::pin!(w1);
        tokio::pin!(w2);
        w1.as_mut().enable();
        w2.as_mut().enable();
        waits.ended(1);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), w1)
                .await
                .is_ok()
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(50), w2.as_mut())
                .await
                .is_err(),
            "task 2 did not end"
        );
        waits.ended_some();
        assert!(
            tokio::time::timeout(Duration::from_millis(100), w2)
                .await
                .is_ok()
        );
    }
}
