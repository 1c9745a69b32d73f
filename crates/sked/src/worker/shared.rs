//! What a worker's lanes share: the tasks it holds (claimed and not yet ended), the
//! heartbeater that keeps their leases, the finisher that reports endings in batches, and
//! the run-time statistics behind `--max-runtime`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::SignedDuration;
use sked_core::TaskId;
use sked_store::ErrorKind;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::AbortHandle;

use super::handler::Erased;
use crate::api::worker::{Ending, Held};
use crate::client::Client;

/// A claimed attempt until its ending is handed to the finisher. Keyed by task and attempt:
/// after a rescue, this worker may hold the next attempt of a task whose old one still runs.
pub(crate) struct Holding {
    /// Tells the handler that cancellation was asked.
    pub(crate) cancel: watch::Sender<bool>,
    /// The running handler, once started.
    pub(crate) abort: Option<AbortHandle>,
    /// The lease is gone (the task was rescued): its result must not be reported.
    pub(crate) lost: bool,
    /// What the handler last reported of its progress, sent with every heartbeat.
    pub(crate) progress: super::handler::Progress,
}

/// Counts of how attempts ended in this worker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Attempts claimed.
    pub claimed: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (retried or dead).
    pub failed: u64,
    /// Attempts snoozed.
    pub snoozed: u64,
    /// Attempts stopped by a cancel.
    pub cancelled: u64,
    /// Given back unstarted or unfinished (shutdown, the prefetch buffer, the deadline).
    pub released: u64,
    /// Rescued while held: the lease was lost and nothing was reported.
    pub lost: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) report: WorkerReport,
    runs: u64,
    run_time: Duration,
}

pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) worker: String,
    pub(crate) kinds: Vec<String>,
    pub(crate) handlers: HashMap<String, Arc<dyn Erased>>,
    pub(crate) lease_ttl: SignedDuration,
    pub(crate) cancel_grace: Duration,
    /// Every task claimed and not yet ended, across lanes.
    pub(crate) holdings: Mutex<HashMap<(TaskId, i32), Holding>>,
    pub(crate) finisher: mpsc::UnboundedSender<(TaskId, i32, Ending)>,
    /// Worker-wide concurrency.
    pub(crate) slots: Arc<Semaphore>,
    pub(crate) stats: Mutex<Stats>,
    /// Before any run was observed, a run is assumed to take this long.
    pub(crate) initial_estimate: Duration,
    /// What this worker tells about itself (the dashboard's list of workers).
    pub(crate) presence: crate::Presence,
    /// Where the spans of runs go.
    pub(crate) telemetry: crate::Telemetry,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Ends a held task: forgets it and hands the ending to the finisher.
    pub(crate) fn end(&self, id: TaskId, attempt: i32, ending: Ending) {
        lock(&self.holdings).remove(&(id, attempt));
        {
            let mut stats = lock(&self.stats);
            let r = &mut stats.report;
            match &ending {
                Ending::Succeeded(_) => r.succeeded += 1,
                Ending::Failed { .. } => r.failed += 1,
                Ending::Snoozed(_) => r.snoozed += 1,
                Ending::Cancelled => r.cancelled += 1,
                Ending::Released => r.released += 1,
            }
        }
        // The finisher outlives every lane.
        let _ = self.finisher.send((id, attempt, ending));
    }

    /// Forgets a task whose lease was lost, reporting nothing.
    pub(crate) fn forget_lost(&self, id: TaskId, attempt: i32) {
        lock(&self.holdings).remove(&(id, attempt));
        lock(&self.stats).report.lost += 1;
    }

    pub(crate) fn is_lost(&self, id: TaskId, attempt: i32) -> bool {
        lock(&self.holdings)
            .get(&(id, attempt))
            .is_none_or(|h| h.lost)
    }

    pub(crate) fn observe_run(&self, took: Duration) {
        let mut s = lock(&self.stats);
        s.runs += 1;
        s.run_time += took;
    }

    /// The average observed run time, or the initial estimate before any run.
    pub(crate) fn estimate(&self) -> Duration {
        let s = lock(&self.stats);
        if s.runs == 0 {
            self.initial_estimate
        } else {
            s.run_time / u32::try_from(s.runs).unwrap_or(u32::MAX)
        }
    }
}

/// Extends the leases of everything held, every third of the lease, in one call; tells
/// handlers about cancellation and stops those whose lease was lost.
pub(crate) async fn heartbeat(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let beat = Duration::try_from(shared.lease_ttl / 3)
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_millis(50));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The worker told sked it is here just before this started.
    let mut last_presence = tokio::time::Instant::now();
    loop {
        if last_presence.elapsed() >= crate::engine::BEAT_EVERY {
            last_presence = tokio::time::Instant::now();
            if let Err(e) = shared.client.beat(&shared.presence).await {
                tracing::debug!(error = %e, "could not tell sked this worker is alive");
            }
        }
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let held: Vec<Held> = lock(&shared.holdings)
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|(&(id, attempt), h)| Held {
                id,
                attempt,
                progress: h.progress.latest(),
            })
            .collect();
        if held.is_empty() {
            continue;
        }
        let replies = match shared
            .client
            .heartbeat_many(&held, Some(shared.lease_ttl))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, tasks = held.len(), "heartbeat failed; retrying at the next beat");
                continue;
            }
        };
        let mut holdings = lock(&shared.holdings);
        for (h, reply) in held.iter().zip(replies) {
            let Some(holding) = holdings.get_mut(&(h.id, h.attempt)) else {
                continue;
            };
            match reply {
                Ok(r) if r.cancel_requested => {
                    holding.cancel.send_replace(true);
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                    tracing::warn!(task = h.id, attempt = h.attempt, error = %e, "lost the lease; stopping the task");
                    holding.lost = true;
                    if let Some(a) = &holding.abort {
                        a.abort();
                    }
                }
                Err(e) => tracing::warn!(task = h.id, error = %e, "heartbeat failed"),
            }
        }
    }
}

/// Reports endings in batches: whatever accumulated while the previous batch was on its way
/// goes in the next. While sked is unreachable it keeps trying for a lease's length; after
/// that the tasks are rescued and run again anyway (at least once).
pub(crate) async fn finish(
    client: Client,
    lease_ttl: SignedDuration,
    mut rx: mpsc::UnboundedReceiver<(TaskId, i32, Ending)>,
) {
    let mut batch = Vec::with_capacity(1024);
    let patience = Duration::try_from(lease_ttl).unwrap_or(Duration::from_secs(30));
    while rx.recv_many(&mut batch, 1024).await > 0 {
        let items: Vec<(TaskId, i32, Ending)> = std::mem::take(&mut batch);
        let give_up = tokio::time::Instant::now() + patience;
        let mut pause = Duration::from_millis(100);
        loop {
            match client.finish_many(items.clone()).await {
                Ok(results) => {
                    for ((id, attempt, _), r) in items.iter().zip(results) {
                        if let Err(e) = r {
                            tracing::warn!(task = id, attempt, error = %e, "the end of the attempt was not recorded");
                        }
                    }
                    break;
                }
                Err(e)
                    if e.kind() == ErrorKind::Unavailable
                        && tokio::time::Instant::now() + pause < give_up =>
                {
                    tracing::warn!(error = %e, tasks = items.len(), "cannot record endings yet; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::warn!(error = %e, tasks = items.len(), "could not record endings");
                    break;
                }
            }
        }
    }
}
