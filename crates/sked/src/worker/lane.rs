//! One lane of a worker: a set of queues with its own concurrency and prefetch buffer. It
//! claims into the buffer, starts the best buffered task whenever a slot is free, and, when
//! the buffer is full, trades its least urgent task for a more urgent one that arrives.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use sked_core::{Task, TaskId, format_duration};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use opentelemetry::context::FutureExt as _;

use super::handler::{BoxFuture, Erased, TaskContext};
use super::shared::{Holding, Shared, lock};
use crate::api::worker::Ending;
use crate::{ClaimRequest, Result};

#[derive(Debug, Clone)]
pub(crate) struct LaneConfig {
    /// Queues this lane claims from; all when empty.
    pub(crate) queues: Vec<String>,
    pub(crate) concurrency: usize,
    /// Claimed tasks waiting for a slot, at most.
    pub(crate) prefetch: usize,
}

/// The end of a bounded run ([`super::Worker::run_for`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// Everything is over by then: what still runs is stopped and released.
    pub(crate) hard_stop: Instant,
    /// A run is expected to take the average observed run time times this.
    pub(crate) tolerance: f64,
}

/// Priority first (higher first), then run time, then id: the order of claims.
type Key = (Reverse<i32>, Timestamp, TaskId);

fn key(t: &Task) -> Key {
    (Reverse(t.priority), t.run_at, t.id)
}

struct Started {
    id: TaskId,
    attempt: i32,
    at: Instant,
    /// The run's span, when spans are recorded.
    span: Option<opentelemetry::Context>,
    _slot: OwnedSemaphorePermit,
}

struct Claim {
    preempt: bool,
    /// A long-poll: it may take a while to return.
    waits: bool,
    fut: BoxFuture<Result<Vec<Task>>>,
}

pub(crate) struct Lane {
    shared: Arc<Shared>,
    cfg: LaneConfig,
    deadline: Option<Deadline>,
    claim_wait: Duration,
    buffer: BTreeMap<Key, Task>,
    running: JoinSet<Ending>,
    started: HashMap<tokio::task::Id, Started>,
    spare: Option<OwnedSemaphorePermit>,
}

/// The future's output, or never when there is none.
async fn maybe<T>(f: Option<&mut BoxFuture<T>>) -> T {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl Lane {
    pub(crate) fn new(
        shared: Arc<Shared>,
        cfg: LaneConfig,
        deadline: Option<Deadline>,
        claim_wait: Duration,
    ) -> Lane {
        Lane {
            shared,
            cfg,
            deadline,
            claim_wait,
            buffer: BTreeMap::new(),
            running: JoinSet::new(),
            started: HashMap::new(),
            spare: None,
        }
    }

    fn held(&self) -> usize {
        self.buffer.len() + self.running.len()
    }

    /// The expected length of one run, with the tolerance of a bounded run.
    fn expected_run(&self, d: &Deadline) -> Duration {
        self.shared.estimate().mul_f64(d.tolerance.max(1.0))
    }

    pub(crate) async fn run(mut self, mut stop: watch::Receiver<bool>, grace: Duration) {
        let mut claim: Option<Claim> = None;
        let mut signal: Option<BoxFuture<Result<u64>>> = None;
        let mut epoch = 0u64;
        let mut preempt = false;
        let mut retry_at: Option<Instant> = None;
        let mut grace_end: Option<Instant> = None;
        let mut draining = false;
        let mut hard_stopped = false;
        loop {
            let now = Instant::now();
            if !draining && (*stop.borrow() || stop.has_changed().is_err()) {
                draining = true;
                grace_end = Some(now + grace);
                tracing::info!(
                    in_flight = self.running.len(),
                    buffered = self.buffer.len(),
                    "worker stopping: releasing buffered tasks, letting running ones finish"
                );
            }
            if !hard_stopped && self.deadline.is_some_and(|d| now >= d.hard_stop) {
                hard_stopped = true;
                draining = true;
                if !self.running.is_empty() {
                    tracing::info!(
                        running = self.running.len(),
                        "run time is up: stopping and releasing running tasks"
                    );
                }
                self.running.abort_all();
            }
            if draining {
                self.release_buffer();
                // A remote long-poll would hold the exit for its whole wait.
                if claim.as_ref().is_some_and(|c| c.waits) && self.shared.client.is_remote() {
                    claim = None;
                }
                signal = None;
            }
            let want_slot = !draining && self.start_what_fits(now);
            if !draining && claim.is_none() && retry_at.is_none() {
                claim = self.next_claim(now, &mut preempt, &stop);
            }
            if claim.is_none() && self.running.is_empty() {
                if draining {
                    break;
                }
                // A bounded run with nothing more that fits: done.
                if self.buffer.is_empty() && retry_at.is_none() && self.deadline.is_some() {
                    break;
                }
            }
            // While tasks wait in the buffer, watch for new work: something more urgent than
            // what waits may have come (claims are made in priority order, but the buffer
            // was filled before it came).
            if draining || self.buffer.is_empty() {
                signal = None;
            } else if signal.is_none() && !preempt {
                let client = self.shared.client.clone();
                signal = Some(Box::pin(async move {
                    client.work_changed(epoch, Duration::from_secs(30)).await
                }));
            }
            let hard_stop = self.deadline.map(|d| d.hard_stop).filter(|_| !hard_stopped);
            let grace_over = grace_end.filter(|_| !self.running.is_empty());
            tokio::select! {
                r = maybe(claim.as_mut().map(|c| &mut c.fut)) => {
                    let was = claim.take().expect("a claim was in flight");
                    match r {
                        Ok(tasks) => self.took(tasks, was.preempt, draining),
                        Err(e) => {
                            tracing::warn!(error = %e, "claim failed; retrying in 1s");
                            retry_at = Some(Instant::now() + Duration::from_secs(1));
                        }
                    }
                }
                Some(j) = self.running.join_next_with_id(), if !self.running.is_empty() => {
                    self.ended(j);
                    // Everything else that has ended too, before deciding anything.
                    while let Some(j) = self.running.try_join_next_with_id() {
                        self.ended(j);
                    }
                }
                e = maybe(signal.as_mut()) => {
                    signal = None;
                    match e {
                        Ok(e) if e != epoch => {
                            epoch = e;
                            preempt = true;
                        }
                        // Nothing announced, but other processes' changes are not announced
                        // on a shared SQLite file: look anyway (at most once a second).
                        Ok(_) => preempt = self.shared.client.engine().is_some_and(|e| !e.announced()),
                        Err(_) => retry_at = Some(Instant::now() + Duration::from_secs(1)),
                    }
                }
                _ = stop.changed(), if !draining => {}
                p = self.shared.slots.clone().acquire_owned(), if want_slot => {
                    self.spare = p.ok();
                }
                _ = sleep_until(retry_at), if retry_at.is_some() => retry_at = None,
                _ = sleep_until(grace_over), if grace_over.is_some() => {
                    tracing::warn!(running = self.running.len(), "grace period over: stopping and releasing the tasks still running");
                    self.running.abort_all();
                    grace_end = None;
                }
                _ = sleep_until(hard_stop), if hard_stop.is_some() => {}
            }
        }
        self.release_buffer();
    }

    /// Starts buffered tasks, best first, while slots are free. Returns whether it stopped for
    /// want of a worker-wide slot.
    fn start_what_fits(&mut self, now: Instant) -> bool {
        while self.running.len() < self.cfg.concurrency {
            let Some((&k, _)) = self.buffer.first_key_value() else {
                return false;
            };
            let (id, attempt) = (k.2, self.buffer[&k].attempt);
            if self.shared.is_lost(id, attempt) {
                self.buffer.remove(&k);
                self.shared.forget_lost(id, attempt);
                continue;
            }
            if let Some(d) = self.deadline
                && now + self.expected_run(&d) > d.hard_stop
            {
                let t = self.buffer.remove(&k).expect("just seen");
                self.shared.end(t.id, t.attempt, Ending::Released);
                continue;
            }
            let slot = match self.spare.take() {
                Some(p) => p,
                None => match self.shared.slots.clone().try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => return true,
                },
            };
            let task = self.buffer.remove(&k).expect("just seen");
            self.spawn(task, slot, now);
        }
        false
    }

    fn spawn(&mut self, mut task: Task, slot: OwnedSemaphorePermit, now: Instant) {
        let (id, attempt) = (task.id, task.attempt);
        let Some(handler) = self.shared.handlers.get(&task.kind).cloned() else {
            // Claims ask only for the kinds handled; give back anything else.
            self.shared.end(id, attempt, Ending::Released);
            return;
        };
        let Some((cancel, progress)) = lock(&self.shared.holdings)
            .get(&(id, attempt))
            .map(|h| (h.cancel.subscribe(), h.progress.clone()))
        else {
            return;
        };
        let timeout = task.timeout.and_then(|t| Duration::try_from(t).ok());
        let span = self.shared.telemetry.run(&mut task, &self.shared.worker);
        let ctx = TaskContext::new(Arc::new(task), cancel.clone(), progress);
        let grace = self.shared.cancel_grace;
        let run = run_one(handler, ctx, cancel, timeout, grace);
        let abort = match &span {
            // The handler runs inside its span: what it starts is a child of the run.
            Some(cx) => self.running.spawn(run.with_context(cx.clone())),
            None => self.running.spawn(run),
        };
        if let Some(h) = lock(&self.shared.holdings).get_mut(&(id, attempt)) {
            h.abort = Some(abort.clone());
        }
        self.started.insert(
            abort.id(),
            Started {
                id,
                attempt,
                at: now,
                span,
                _slot: slot,
            },
        );
    }

    /// A run ended (or was stopped): report it.
    fn ended(&mut self, j: std::result::Result<(tokio::task::Id, Ending), tokio::task::JoinError>) {
        let (tid, result) = match j {
            Ok((tid, end)) => (tid, Ok(end)),
            Err(e) => (e.id(), Err(e)),
        };
        let Some(s) = self.started.remove(&tid) else {
            return;
        };
        if self.shared.is_lost(s.id, s.attempt) {
            self.shared.forget_lost(s.id, s.attempt);
            if let Some(cx) = &s.span {
                crate::telemetry::run_ended(cx, &Ending::Released);
            }
            return;
        }
        let ending = match result {
            Ok(end) => {
                self.shared.observe_run(s.at.elapsed());
                end
            }
            Err(e) if e.is_panic() => {
                self.shared.observe_run(s.at.elapsed());
                let payload = e.into_panic();
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic".into());
                tracing::error!(task = s.id, attempt = s.attempt, %message, "the handler panicked");
                Ending::Failed {
                    error: format!("the handler panicked: {message}"),
                    retryable: true,
                }
            }
            // Stopped by this worker (grace period or run time over): give it back.
            Err(_) => Ending::Released,
        };
        if let Some(cx) = &s.span {
            crate::telemetry::run_ended(cx, &ending);
        }
        self.shared.end(s.id, s.attempt, ending);
    }

    fn took(&mut self, tasks: Vec<Task>, preempt: bool, draining: bool) {
        {
            let mut holdings = lock(&self.shared.holdings);
            for t in &tasks {
                holdings.insert(
                    (t.id, t.attempt),
                    Holding {
                        cancel: watch::channel(false).0,
                        abort: None,
                        lost: false,
                        progress: Default::default(),
                    },
                );
            }
        }
        lock(&self.shared.stats).report.claimed += tasks.len() as u64;
        for t in tasks {
            if draining {
                self.shared.end(t.id, t.attempt, Ending::Released);
            } else {
                self.buffer.insert(key(&t), t);
            }
        }
        if preempt {
            // More urgent work came in: the least urgent buffered tasks make room.
            while self.held() > self.cfg.concurrency + self.cfg.prefetch {
                let Some((_, t)) = self.buffer.pop_last() else {
                    break;
                };
                self.shared.end(t.id, t.attempt, Ending::Released);
            }
        }
    }

    fn release_buffer(&mut self) {
        while let Some((_, t)) = self.buffer.pop_first() {
            self.shared.end(t.id, t.attempt, Ending::Released);
        }
    }

    /// The claim to make now, if any.
    fn next_claim(
        &self,
        now: Instant,
        preempt: &mut bool,
        stop: &watch::Receiver<bool>,
    ) -> Option<Claim> {
        let mut cap = self.cfg.concurrency + self.cfg.prefetch;
        let mut wait = self.claim_wait;
        if let Some(d) = self.deadline {
            let run = self.expected_run(&d).max(Duration::from_millis(1));
            let left = d.hard_stop.saturating_duration_since(now);
            if left < run + Duration::from_millis(50) {
                return None;
            }
            // No more than can still start and finish in time.
            let rounds = (left.as_secs_f64() / run.as_secs_f64()).floor() as usize;
            cap = cap.min(self.cfg.concurrency * rounds.max(1));
            wait = wait.min(left - run);
        }
        let held = self.held();
        // Refill in batches: once a quarter of the capacity is free, or at once when a slot
        // would otherwise have nothing to run. Small claims would cost a transaction each.
        let idle_slots = held < self.cfg.concurrency;
        let refill = held < cap && (idle_slots || cap - held >= (cap / 4).max(1));
        let mut req = ClaimRequest {
            worker: self.shared.worker.clone(),
            queues: self.cfg.queues.clone(),
            kinds: self.shared.kinds.clone(),
            max: 0,
            min_priority: None,
            wait: None,
            lease_ttl: Some(self.shared.lease_ttl),
            stop: Some(stop.clone()),
        };
        let is_preempt = if refill {
            req.max = u32::try_from(cap - held).unwrap_or(u32::MAX).min(1000);
            // Returns as soon as anything is claimable: nothing is missed by waiting.
            req.wait = Some(wait);
            false
        } else if *preempt && held < cap {
            // Room left: an ordinary claim brings the most urgent work first.
            *preempt = false;
            req.max = u32::try_from(cap - held).unwrap_or(u32::MAX).min(1000);
            false
        } else if *preempt && !self.buffer.is_empty() {
            // Full: only what is more urgent than the least urgent buffered task, which then
            // makes room.
            *preempt = false;
            let (&(Reverse(lowest), _, _), _) = self.buffer.last_key_value()?;
            req.max = u32::try_from(self.buffer.len().min(32)).unwrap_or(32);
            req.min_priority = Some(lowest.saturating_add(1));
            true
        } else {
            return None;
        };
        let waits = req.wait.is_some();
        let client = self.shared.client.clone();
        Some(Claim {
            preempt: is_preempt,
            waits,
            fut: Box::pin(async move { client.claim(req).await }),
        })
    }
}

/// Runs one handler: to its end, its timeout (the handler is dropped: it stops at its next
/// await), or a cancel request (the handler gets `grace` to stop by itself).
async fn run_one(
    handler: Arc<dyn Erased>,
    ctx: TaskContext,
    mut cancel: watch::Receiver<bool>,
    timeout: Option<Duration>,
    grace: Duration,
) -> Ending {
    let mut work = handler.call(ctx);
    let timed_out = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let cancelled = async {
        if cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        end = &mut work => end,
        _ = timed_out => Ending::Failed {
            error: format!(
                "timed out after {}",
                format_duration(timeout.and_then(|t| jiff::SignedDuration::try_from(t).ok()).unwrap_or_default())
            ),
            retryable: true,
        },
        _ = cancelled => match tokio::time::timeout(grace, &mut work).await {
            Ok(end) => end,
            Err(_) => Ending::Cancelled,
        },
    }
}
