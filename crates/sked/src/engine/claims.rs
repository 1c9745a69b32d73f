//! The worker's side: claims (with long-poll), heartbeats, and attempt endings (single ones
//! grouped into one commit, or a worker's batch in one store operation).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{Task, TaskId};
use sked_store::{
    FinishOutcome, HeartbeatReply, TaskClaimParams, TaskEnded, TaskFinishParams,
    TaskHeartbeatParams,
};

use super::observe::Presence;
use super::waiting_claims::Wanted;
use super::wake::{POLL_ANNOUNCED, POLL_UNANNOUNCED};
use super::{Engine, lock};
use crate::error::{Error, Result};

/// A claim: up to `max` due tasks from `queues` (all when empty) of `kinds` (any when empty).
#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    /// The claiming worker's id, recorded on each attempt.
    pub worker: String,
    /// Queues to claim from; every queue when empty.
    pub queues: Vec<String>,
    /// Kinds the worker can run; any when empty.
    pub kinds: Vec<String>,
    /// At most this many tasks.
    pub max: u32,
    /// Only tasks of at least this priority.
    pub min_priority: Option<i32>,
    /// Long-poll: wait up to this long for a task when none is due.
    pub wait: Option<Duration>,
    /// Lease length; the engine's default when `None`.
    pub lease_ttl: Option<SignedDuration>,
    /// Ends a waiting claim early (empty) when it turns true: a worker shutting down.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The most queues, and the most kinds, one claim may name.
pub const MAX_CLAIM_NAMES: usize = 100;

impl ClaimRequest {
    /// Checks the names a claim gives: its worker, and at most [`MAX_CLAIM_NAMES`] valid queue
    /// and kind names each (a claim naming tens of thousands made a statement the database
    /// refused).
    fn validate(&self) -> Result<()> {
        sked_core::validate_name("worker", &self.worker)?;
        for (what, names) in [("queue", &self.queues), ("kind", &self.kinds)] {
            if names.len() > MAX_CLAIM_NAMES {
                return Err(Error::Invalid(format!(
                    "a claim names {} {what}s; at most {MAX_CLAIM_NAMES}",
                    names.len()
                )));
            }
            for name in names {
                sked_core::validate_name(what, name)?;
            }
        }
        Ok(())
    }
}

impl Engine {
    /// Claims due tasks. With `wait`, returns as soon as a task is claimable (woken by enqueues
    /// in this process, or at the next task's due time), or empty when the wait is over.
    pub async fn claim(&self, req: ClaimRequest) -> Result<Vec<Task>> {
        req.validate()?;
        let deadline = req.wait.map(|w| tokio::time::Instant::now() + w);
        let params = |now| TaskClaimParams {
            queues: req.queues.clone(),
            kinds: req.kinds.clone(),
            max: req.max,
            min_priority: req.min_priority,
            worker: req.worker.clone(),
            lease_ttl: req.lease_ttl.unwrap_or(self.inner.config.lease_ttl),
            timeout_grace: self.inner.config.timeout_grace,
            now,
        };
        loop {
            // A waiting claim is a sign of life too (it looks again at least every 30 s). The
            // presence is only built when it is due to be written.
            self.seen(&req.worker, || Presence {
                id: req.worker.clone(),
                role: "worker".into(),
                queues: req.queues.clone(),
                ..Presence::default()
            })
            .await;
            // Register for wake-ups before looking, so an enqueue in between is not missed.
            let woken = self.tasks_changed().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let now = self.now();
            let started = std::time::SystemTime::now();
            let claimed = self.inner.store.task_claim(params(now)).await?;
            self.inner.metrics.claimed(&claimed, now);
            self.inner
                .config
                .telemetry
                .claimed(&claimed, started, &req.worker);
            let Some(deadline) = deadline else {
                return Ok(claimed);
            };
            if !claimed.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(claimed);
            }
            // Sleep until the next task is due, a wake-up, or the deadline; poll for tasks
            // enqueued by other processes unless the store announces them.
            let poll = if self.announced() {
                POLL_ANNOUNCED
            } else {
                POLL_UNANNOUNCED
            };
            let mut until = deadline.min(tokio::time::Instant::now() + poll);
            if let Some(next) = self.next_due().await? {
                let wait = next.duration_since(self.now());
                let wait = Duration::try_from(wait).unwrap_or(Duration::ZERO);
                until = until.min(tokio::time::Instant::now() + wait);
            }
            let mut stop = req.stop.clone();
            let stopped = async {
                match stop.as_mut() {
                    Some(s) => {
                        let _ = s.wait_for(|s| *s).await;
                    }
                    None => std::future::pending().await,
                }
            };
            // A task enqueued on this node meanwhile may come straight here (see `waiting_claims`);
            // not to a claim of no tasks, whose receiver never hears.
            let (_never_sent, never) = tokio::sync::oneshot::channel();
            let (ticket, mut handed) = match req.max {
                0 => (None, never),
                _ => {
                    let (ticket, handed) = lock(&self.inner.waiters).wait(Wanted {
                        queues: req.queues.clone(),
                        kinds: req.kinds.clone(),
                        min_priority: req.min_priority,
                        worker: req.worker.clone(),
                        lease_ttl: params(now).lease_ttl,
                    });
                    (Some(ticket), handed)
                }
            };
            let leave =
                |ticket: Option<u64>| ticket.is_none_or(|t| lock(&self.inner.waiters).leave(t));
            tokio::select! {
                task = &mut handed => match task {
                    Ok(task) => return Ok(self.handed(task, &req.worker)),
                    // Inserted available after all (its queue is paused or limited): look.
                    Err(_) => continue,
                },
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(until) => {}
                _ = stopped => {
                    // A task on its way finds this claim gone and is given back.
                    leave(ticket);
                    return Ok(Vec::new());
                }
            }
            if !leave(ticket) {
                // A task is on its way: take it, or look if it went in available.
                if let Ok(task) = handed.await {
                    return Ok(self.handed(task, &req.worker));
                }
                continue;
            }
            // Nothing came by the deadline: the caller asks again anyway, and claiming once
            // more here would double an idle worker's queries.
            if until >= deadline && tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    /// How many claims wait on this node for work (long-polls with nothing to claim yet). A
    /// task enqueued on this node goes straight to the longest-waiting one that takes it.
    pub fn waiting_claims(&self) -> usize {
        lock(&self.inner.waiters).count()
    }

    /// A task handed to a waiting claim, counted as claimed.
    fn handed(&self, task: Task, worker: &str) -> Vec<Task> {
        let claimed = vec![task];
        self.inner.metrics.claimed(&claimed, self.now());
        let at = std::time::SystemTime::now();
        self.inner.config.telemetry.claimed(&claimed, at, worker);
        claimed
    }

    /// Extends the lease of a running task held with `attempt` (by `lease_ttl`, or the
    /// engine's default), keeping the `progress` it reports, if any (see
    /// [`sked_core::check_progress`]). The reply says whether a cancel was requested.
    pub async fn heartbeat(
        &self,
        id: TaskId,
        attempt: i32,
        lease_ttl: Option<SignedDuration>,
        progress: Option<serde_json::Value>,
    ) -> Result<HeartbeatReply> {
        if let Some(p) = &progress {
            sked_core::check_progress(p)?;
        }
        Ok(self
            .inner
            .store
            .task_heartbeat(TaskHeartbeatParams {
                id,
                attempt,
                lease_ttl: lease_ttl.unwrap_or(self.inner.config.lease_ttl),
                timeout_grace: self.inner.config.timeout_grace,
                now: self.now(),
                progress,
            })
            .await?)
    }

    /// Ends an attempt. Concurrent calls are committed together (group commit).
    pub async fn finish(&self, id: TaskId, attempt: i32, outcome: FinishOutcome) -> Result<Task> {
        let params = finish_params(id, attempt, outcome, stored_time(self.now()));
        let (outcome, now) = (params.outcome.clone(), params.now);
        let task = self.inner.finisher.finish(params).await?;
        self.finished(&TaskEnded::from(&task), &outcome, now);
        self.wake_workers();
        Ok(task)
    }

    /// Metrics and wake-ups after an attempt ended: a task to run again, a schedule's overlap
    /// changed. The caller then wakes the workers once ([`Engine::wake_workers`]): an ended
    /// attempt frees room under its queue's concurrency limit or its key's per-key limit,
    /// which no announcement says, so claims waiting here look again.
    fn finished(&self, task: &TaskEnded, outcome: &FinishOutcome, now: Timestamp) {
        self.inner.metrics.finished(task, outcome, now);
        if task.state.is_finished() {
            self.inner.task_waits.ended(task.id);
        }
        if !task.state.is_finished() && task.run_at > self.now() {
            self.saw_waiting(Some(task.run_at));
        }
        if let Some(schedule) = &task.schedule {
            if task.state.is_finished() {
                self.run_ended(schedule);
            } else {
                self.inner.schedules_changed.notify_waiters();
            }
        }
    }

    /// Ends many attempts in one store operation (a batch is its own group commit). One
    /// result per item, in order, saying what the ending left of each task (the store need
    /// not read whole rows: [`sked_store::Store::task_finish_many_lean`]); the whole call fails only
    /// when the store does.
    pub async fn finish_many(
        &self,
        items: Vec<(TaskId, i32, FinishOutcome)>,
    ) -> Result<Vec<Result<TaskEnded>>> {
        // The batch ends at one moment: its successes share a finish time (and a statement).
        let now = stored_time(self.now());
        let params: Vec<TaskFinishParams> = items
            .into_iter()
            .map(|(id, attempt, outcome)| finish_params(id, attempt, outcome, now))
            .collect();
        let outcomes: Vec<FinishOutcome> = params.iter().map(|p| p.outcome.clone()).collect();
        let results = self.inner.store.task_finish_many_lean(params).await?;
        let results: Vec<Result<TaskEnded>> = results
            .into_iter()
            .zip(outcomes)
            .map(|(r, outcome)| {
                let task = r?;
                self.finished(&task, &outcome, now);
                Ok(task)
            })
            .collect();
        // Once for the whole batch: waiting claims look again once.
        if results.iter().any(Result::is_ok) {
            self.wake_workers();
        }
        Ok(results)
    }

    /// Extends the leases of many running tasks in one store operation, each item a task, its
    /// attempt and the progress it reports, if any. One result per item; a progress that is
    /// not one refuses the whole call.
    pub async fn heartbeat_many(
        &self,
        items: &[(TaskId, i32, Option<serde_json::Value>)],
        lease_ttl: Option<SignedDuration>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        for (id, _, progress) in items {
            if let Some(p) = progress {
                sked_core::check_progress(p)
                    .map_err(|e| Error::Invalid(format!("task {id}: {}", e.message())))?;
            }
        }
        let now = self.now();
        let lease_ttl = lease_ttl.unwrap_or(self.inner.config.lease_ttl);
        let params = items
            .iter()
            .map(|(id, attempt, progress)| TaskHeartbeatParams {
                id: *id,
                attempt: *attempt,
                lease_ttl,
                timeout_grace: self.inner.config.timeout_grace,
                now,
                progress: progress.clone(),
            })
            .collect();
        let replies = self.inner.store.task_heartbeat_many(params).await?;
        Ok(replies
            .into_iter()
            .map(|r| r.map_err(Error::from))
            .collect())
    }
}

/// `t` cut to the microsecond, as stores keep times: an ending's answer then gives the finish
/// time a later read shows.
fn stored_time(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t)
}

/// The store's parameters of an attempt ending at `now`, with a fresh jitter for its backoff.
fn finish_params(
    id: TaskId,
    attempt: i32,
    outcome: FinishOutcome,
    now: Timestamp,
) -> TaskFinishParams {
    TaskFinishParams {
        id,
        attempt,
        outcome,
        now,
        jitter: fastrand::f64(),
    }
}
