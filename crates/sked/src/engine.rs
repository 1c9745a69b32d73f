//! The [`Engine`]: every operation on tasks, schedules and queues, on top of a [`Store`], with
//! validation, the injected clock and in-process wake-ups.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{
    Clock, NewTask, PlanInput, ScheduleDef, Spec, SystemClock, Task, TaskId, parse_zone,
};
use sked_store::*;
use tokio::sync::Notify;

use crate::batch::FinishBatcher;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Settings of one engine (one node).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node's name in leases and task history.
    pub node_id: String,
    /// How long a claimed task's lease lasts without a heartbeat.
    pub lease_ttl: SignedDuration,
    /// An occurrence less late than this is on time; older ones are "missed" (catch-up).
    pub misfire_grace: SignedDuration,
    /// How often the leader looks for expired leases.
    pub rescue_interval: SignedDuration,
    /// How long finished tasks are kept.
    pub retention: SignedDuration,
    /// How long the leader lease lasts without renewal.
    pub leader_ttl: SignedDuration,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig::with_lease_ttl(SignedDuration::from_secs(30))
    }
}

impl EngineConfig {
    /// Settings derived from the task lease TTL: the leader lease lasts as long, at most 15 s,
    /// and expired leases are looked for every tenth of it (between 250 ms and 3 s).
    pub fn with_lease_ttl(lease_ttl: SignedDuration) -> EngineConfig {
        EngineConfig {
            node_id: default_node_id(),
            lease_ttl,
            misfire_grace: SignedDuration::from_secs(10),
            rescue_interval: (lease_ttl / 10).clamp(
                SignedDuration::from_millis(250),
                SignedDuration::from_secs(3),
            ),
            retention: SignedDuration::from_hours(24 * 7),
            leader_ttl: lease_ttl.min(SignedDuration::from_secs(15)),
        }
    }
}

/// `HOSTNAME-PID-XXXX`: unique per process, readable in task history.
pub(crate) fn default_node_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

/// A claim: up to `max` due tasks from `queues` (all when empty) of `kinds` (any when empty).
#[derive(Debug, Clone, Default)]
pub struct ClaimRequest {
    pub worker: String,
    pub queues: Vec<String>,
    pub kinds: Vec<String>,
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

/// The scheduler engine of one node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    /// Woken when tasks may have become claimable (enqueue, retry, release).
    tasks_changed: Notify,
    /// Grows each time `tasks_changed` is woken: lets a worker ask "anything new since?".
    work_epoch: AtomicU64,
    /// Woken when schedules changed or a scheduled task finished (overlap, buffers).
    schedules_changed: Notify,
    /// Woken when a lease was given up somewhere.
    leases_changed: Notify,
    /// The store announces other processes' changes and its listener is up: no need to poll.
    announced: AtomicBool,
    /// This node holds the leader lease (set by [`crate::maintenance`]).
    leader: AtomicBool,
    /// When the next waiting task is due, as far as this node knows.
    next_due: Mutex<DueHint>,
    finisher: FinishBatcher,
    metrics: Metrics,
    /// When each worker's presence was last written, to write it at most every
    /// [`BEAT_EVERY`].
    beats: Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// The earliest run time of a scheduled or retrying task, kept up to date from this node's
/// own changes and the store's announcements, so that idle workers need not ask the store.
#[derive(Debug, Clone, Copy, Default)]
struct DueHint {
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

/// A worker's or node's presence is written at most this often; it counts as alive for
/// [`ALIVE_FOR`] after it was last seen (three beats, so a busy database does not make it
/// flicker). Once a minute keeps an idle node within its budget of one query a second: every
/// 30 s measured 1.14 transactions a second where 0.94 were before (BENCHMARKS.md, idle). A
/// worker that stops says goodbye at once; one that is killed shows as gone after 3 minutes.
pub const BEAT_EVERY: Duration = Duration::from_secs(60);
pub const ALIVE_FOR: SignedDuration = SignedDuration::from_secs(180);

/// What a worker or node tells about itself.
#[derive(Debug, Clone, Default)]
pub struct Presence {
    pub id: String,
    /// `worker` or `node`.
    pub role: String,
    pub queues: Vec<String>,
    pub concurrency: Option<u32>,
    /// It is shutting down.
    pub stopping: bool,
}

/// Who leads the cluster, as the database has it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClusterInfo {
    /// The node answering.
    pub node: String,
    /// The holder of the leader lease, `None` while nobody holds it.
    pub leader: Option<String>,
    pub leader_until: Option<Timestamp>,
    pub backend: &'static str,
}

/// How often a waiting claim looks again when nothing tells it of new work: rarely while the
/// store announces changes, every second while it does not (or cannot).
const POLL_ANNOUNCED: Duration = Duration::from_secs(30);
const POLL_UNANNOUNCED: Duration = Duration::from_secs(1);

impl Engine {
    pub fn new(store: Arc<dyn Store>, config: EngineConfig) -> Engine {
        Engine::with_clock(store, Arc::new(SystemClock), config)
    }

    pub fn with_clock(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Engine {
        let finisher = FinishBatcher::new(store.clone());
        let events = store.subscribe();
        let inner = Arc::new(Inner {
            store,
            clock,
            config,
            tasks_changed: Notify::new(),
            work_epoch: AtomicU64::new(0),
            schedules_changed: Notify::new(),
            leases_changed: Notify::new(),
            announced: AtomicBool::new(false),
            leader: AtomicBool::new(false),
            next_due: Mutex::new(DueHint::default()),
            finisher,
            metrics: Metrics::new(),
            beats: Mutex::new(std::collections::HashMap::new()),
        });
        if let (Some(events), Ok(rt)) = (events, tokio::runtime::Handle::try_current()) {
            // Subscribed first: a change of state after this read arrives as an event.
            inner
                .announced
                .store(inner.store.listening(), Ordering::Relaxed);
            rt.spawn(follow_announcements(Arc::downgrade(&inner), events));
        }
        Engine { inner }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    pub(crate) fn schedules_changed(&self) -> &Notify {
        &self.inner.schedules_changed
    }

    pub(crate) fn leases_changed(&self) -> &Notify {
        &self.inner.leases_changed
    }

    /// Whether this node holds the leader lease and does the leader-only duties.
    pub fn is_leader(&self) -> bool {
        self.inner.leader.load(Ordering::Relaxed)
    }

    pub(crate) fn set_leader(&self, leader: bool) {
        self.inner.leader.store(leader, Ordering::Relaxed);
    }

    /// Whether changes made by other nodes are announced (so idle loops need not poll).
    pub fn announced(&self) -> bool {
        self.inner.announced.load(Ordering::Relaxed)
    }

    fn wake_workers(&self) {
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

    /// Notes tasks that will wait until `run_at` (`None`: unknown, ask the store).
    fn saw_waiting(&self, run_at: Option<Timestamp>) {
        lock(&self.inner.next_due).saw(run_at);
    }

    /// When the next waiting task is due: from what this node knows, or from the store.
    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let now = self.now();
        {
            let mut hint = lock(&self.inner.next_due);
            if hint.known && self.announced() && hint.at.is_none_or(|t| t > now) {
                return Ok(hint.at);
            }
            hint.seen = None;
            hint.seen_unknown = false;
        }
        let stored = self.inner.store.task_next_run_at().await?;
        // What was announced while the store was asked may not be in its answer.
        let mut hint = lock(&self.inner.next_due);
        hint.at = earliest(stored, hint.seen);
        hint.known = !hint.seen_unknown;
        Ok(hint.at)
    }

    // ---- tasks ----

    /// Enqueues one task; returns its id (or the id of the unfinished task holding its unique key).
    pub async fn enqueue(&self, task: NewTask) -> Result<TaskInserted> {
        Ok(self.enqueue_many(vec![task]).await?.remove(0))
    }

    /// Enqueues tasks in one transaction: all or none.
    pub async fn enqueue_many(&self, tasks: Vec<NewTask>) -> Result<Vec<TaskInserted>> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        for (i, t) in tasks.iter().enumerate() {
            t.validate().map_err(|e| {
                if tasks.len() == 1 {
                    Error::from(e)
                } else {
                    Error::Invalid(format!("task {i}: {e}"))
                }
            })?;
        }
        let now = self.now();
        let queues = enqueued_per_queue(&tasks);
        let first_waiting = tasks
            .iter()
            .filter_map(|t| t.run_at)
            .filter(|t| *t > now)
            .min();
        let inserted = self
            .inner
            .store
            .task_insert_many(TaskInsertParams {
                tasks: tasks.into_iter().map(Into::into).collect(),
                now,
            })
            .await?;
        for (queue, n) in queues {
            self.inner.metrics.enqueued(&queue, n);
        }
        if first_waiting.is_some() {
            self.saw_waiting(first_waiting);
        }
        self.wake_workers();
        Ok(inserted)
    }

    /// The Prometheus text exposition of this engine's metrics, with the task counts read
    /// from the store now. Counters and histograms are this process's; the task counts are the
    /// whole database's, the same on every node.
    pub async fn metrics_text(&self) -> Result<String> {
        let queues = self
            .inner
            .store
            .queue_list(crate::metrics::COUNT_LIMIT)
            .await?;
        Ok(self.inner.metrics.render(&queues, self.is_leader()))
    }

    /// Records a worker's or node's presence (a worker sends one every [`BEAT_EVERY`]).
    /// Presence is advisory: a failure to write it is logged, not returned.
    pub async fn beat(&self, p: &Presence) {
        self.inner
            .beats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p.id.clone(), std::time::Instant::now());
        self.write_beat(p.clone()).await;
    }

    /// A sign of life seen in passing (a claim, a maintenance pass): written only when this
    /// engine has written none for the id in the last [`BEAT_EVERY`]. It leaves the
    /// concurrency a worker told as it was.
    pub(crate) async fn seen(&self, id: &str, presence: impl FnOnce() -> Presence) {
        let now = std::time::Instant::now();
        {
            let mut beats = self.inner.beats.lock().unwrap_or_else(|e| e.into_inner());
            if beats
                .get(id)
                .is_some_and(|last| now.duration_since(*last) < BEAT_EVERY)
            {
                return;
            }
            if beats.len() > 10_000 {
                beats.retain(|_, last| now.duration_since(*last) < BEAT_EVERY);
            }
            beats.insert(id.to_string(), now);
        }
        self.write_beat(presence()).await;
    }

    async fn write_beat(&self, p: Presence) {
        let params = WorkerBeatParams {
            id: p.id,
            role: p.role,
            queues: p.queues,
            concurrency: p.concurrency,
            stopping: p.stopping,
            now: self.now(),
        };
        if let Err(e) = self.inner.store.worker_beat(params).await {
            tracing::debug!(error = %e, "could not record a worker's presence");
        }
    }

    /// Workers and nodes seen in the last day, most recently seen first.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        let since = self
            .now()
            .checked_sub(SignedDuration::from_hours(24))
            .unwrap_or(Timestamp::MIN);
        Ok(self.inner.store.worker_list(since).await?)
    }

    /// Whether a worker or node counts as alive now.
    pub fn is_alive(&self, w: &WorkerInfo) -> bool {
        w.stopped_at.is_none()
            && self
                .now()
                .checked_sub(ALIVE_FOR)
                .is_ok_and(|cut| w.last_seen_at >= cut)
    }

    /// Ended work per minute over the last `minutes` minutes (the current one included),
    /// every minute present, oldest first.
    pub async fn activity(&self, minutes: u32) -> Result<Vec<ActivityBucket>> {
        let minute = SignedDuration::from_secs(60);
        let now = self.now();
        let this_minute = now.as_second().div_euclid(60) * 60;
        let since = Timestamp::from_second(this_minute - 60 * i64::from(minutes.max(1) - 1))
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let found = self
            .inner
            .store
            .activity(ActivityParams {
                since,
                bucket: minute,
            })
            .await?;
        let mut out: Vec<ActivityBucket> = (0..minutes.max(1))
            .map(|i| ActivityBucket {
                start: since + minute * i32::try_from(i).unwrap_or(0),
                ..ActivityBucket::default()
            })
            .collect();
        for b in found {
            if let Some(slot) = out.iter_mut().find(|o| o.start == b.start) {
                *slot = b;
            }
        }
        Ok(out)
    }

    /// This node, and the leader as the database has it.
    pub async fn cluster(&self) -> Result<ClusterInfo> {
        let lease = self
            .inner
            .store
            .lease_get(crate::maintenance::LEADER_LEASE, self.now())
            .await?;
        Ok(ClusterInfo {
            node: self.inner.config.node_id.clone(),
            leader_until: lease.as_ref().map(|l| l.expires_at),
            leader: lease.map(|l| l.holder),
            backend: self.inner.store.backend(),
        })
    }

    pub async fn task(&self, id: TaskId) -> Result<Task> {
        Ok(self.inner.store.task_get(id).await?)
    }

    pub async fn tasks(&self, params: TaskListParams) -> Result<Vec<Task>> {
        Ok(self.inner.store.task_list(params).await?)
    }

    pub async fn cancel(&self, id: TaskId) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_cancel(TaskCancelParams {
                id,
                now: self.now(),
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(t)
    }

    pub async fn retry(&self, id: TaskId) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_retry(TaskRetryParams {
                id,
                now: self.now(),
            })
            .await?;
        self.wake_workers();
        Ok(t)
    }

    pub async fn reschedule(&self, id: TaskId, run_at: Timestamp) -> Result<Task> {
        let t = self
            .inner
            .store
            .task_reschedule(TaskRescheduleParams {
                id,
                run_at,
                now: self.now(),
            })
            .await?;
        self.saw_waiting(Some(run_at));
        self.wake_workers();
        Ok(t)
    }

    /// Claims due tasks. With `wait`, returns as soon as a task is claimable (woken by enqueues
    /// in this process, or at the next task's due time), or empty when the wait is over.
    pub async fn claim(&self, req: ClaimRequest) -> Result<Vec<Task>> {
        let deadline = req.wait.map(|w| tokio::time::Instant::now() + w);
        let params = |now| TaskClaimParams {
            queues: req.queues.clone(),
            kinds: req.kinds.clone(),
            max: req.max,
            min_priority: req.min_priority,
            worker: req.worker.clone(),
            lease_ttl: req.lease_ttl.unwrap_or(self.inner.config.lease_ttl),
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
            let woken = self.inner.tasks_changed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let now = self.now();
            let claimed = self.inner.store.task_claim(params(now)).await?;
            self.inner.metrics.claimed(&claimed, now);
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
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(until) => {}
                _ = stopped => return Ok(Vec::new()),
            }
            // Nothing came by the deadline: the caller asks again anyway, and claiming once
            // more here would double an idle worker's queries.
            if until >= deadline && tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    pub async fn heartbeat(
        &self,
        id: TaskId,
        attempt: i32,
        lease_ttl: Option<SignedDuration>,
    ) -> Result<HeartbeatReply> {
        Ok(self
            .inner
            .store
            .task_heartbeat(TaskHeartbeatParams {
                id,
                attempt,
                lease_ttl: lease_ttl.unwrap_or(self.inner.config.lease_ttl),
                now: self.now(),
            })
            .await?)
    }

    /// Ends an attempt. Concurrent calls are committed together (group commit).
    pub async fn finish(&self, id: TaskId, attempt: i32, outcome: FinishOutcome) -> Result<Task> {
        let params = self.finish_params(id, attempt, outcome);
        let (outcome, now) = (params.outcome.clone(), params.now);
        let task = self.inner.finisher.finish(params).await?;
        self.finished(&task, &outcome, now);
        Ok(task)
    }

    fn finish_params(&self, id: TaskId, attempt: i32, outcome: FinishOutcome) -> TaskFinishParams {
        TaskFinishParams {
            id,
            attempt,
            outcome,
            now: self.now(),
            jitter: fastrand::f64(),
        }
    }

    /// Metrics and wake-ups after an attempt ended: a task to run again, a schedule's overlap
    /// changed.
    fn finished(&self, task: &Task, outcome: &FinishOutcome, now: Timestamp) {
        self.inner.metrics.finished(task, outcome, now);
        if !task.state.is_finished() {
            if task.run_at <= self.now() {
                self.wake_workers();
            } else {
                self.saw_waiting(Some(task.run_at));
            }
        }
        if task.schedule.is_some() {
            self.inner.schedules_changed.notify_waiters();
        }
    }

    /// Ends many attempts in one store operation (a batch is its own group commit). One
    /// result per item, in order; the whole call fails only when the store does.
    pub async fn finish_many(
        &self,
        items: Vec<(TaskId, i32, FinishOutcome)>,
    ) -> Result<Vec<Result<Task>>> {
        let params: Vec<TaskFinishParams> = items
            .into_iter()
            .map(|(id, attempt, outcome)| self.finish_params(id, attempt, outcome))
            .collect();
        let outcomes: Vec<(FinishOutcome, Timestamp)> =
            params.iter().map(|p| (p.outcome.clone(), p.now)).collect();
        let results = self.inner.store.task_finish_many(params).await?;
        Ok(results
            .into_iter()
            .zip(outcomes)
            .map(|(r, (outcome, now))| {
                let task = r?;
                self.finished(&task, &outcome, now);
                Ok(task)
            })
            .collect())
    }

    /// Extends the leases of many running tasks in one store operation. One result per item.
    pub async fn heartbeat_many(
        &self,
        items: &[(TaskId, i32)],
        lease_ttl: Option<SignedDuration>,
    ) -> Result<Vec<Result<HeartbeatReply>>> {
        let now = self.now();
        let lease_ttl = lease_ttl.unwrap_or(self.inner.config.lease_ttl);
        let params = items
            .iter()
            .map(|&(id, attempt)| TaskHeartbeatParams {
                id,
                attempt,
                lease_ttl,
                now,
            })
            .collect();
        let replies = self.inner.store.task_heartbeat_many(params).await?;
        Ok(replies
            .into_iter()
            .map(|r| r.map_err(Error::from))
            .collect())
    }

    // ---- queues ----

    /// Every queue with its counts per state, each counted up to `count_limit`
    /// ([`sked_store::QUEUE_COUNT_LIMIT`] is the usual one): see [`QueueInfo::counts_at_least`].
    pub async fn queues(&self, count_limit: u64) -> Result<Vec<QueueInfo>> {
        Ok(self.inner.store.queue_list(count_limit).await?)
    }

    pub async fn queue_update(&self, params: QueueUpdateParams) -> Result<QueueInfo> {
        sked_core::validate_name("queue", &params.name)?;
        let q = self.inner.store.queue_update(params).await?;
        self.wake_workers();
        Ok(q)
    }

    // ---- schedules ----

    /// Creates or replaces a schedule.
    pub async fn schedule_put(&self, def: ScheduleDef) -> Result<Schedule> {
        let (spec, tz) = def.validate()?;
        let now = self.now();
        // A new or changed schedule fires from now on; intervals count from now.
        let next_fire_at = if def.paused {
            None
        } else {
            spec.next_after(now, &tz, now)
        };
        let s = self
            .inner
            .store
            .schedule_upsert(ScheduleUpsertParams {
                def,
                next_fire_at,
                now,
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(s)
    }

    /// Makes the schedules that `group` declares in code exist as declared (see
    /// [`Store::schedule_sync`]): idempotent, safe when many instances start at once.
    pub async fn schedules_sync(
        &self,
        group: &str,
        defs: Vec<ScheduleDef>,
    ) -> Result<ScheduleSyncReport> {
        sked_core::validate_name("schedule group", group)?;
        let now = self.now();
        let mut schedules = Vec::with_capacity(defs.len());
        for def in defs {
            if schedules
                .iter()
                .any(|d: &DeclaredSchedule| d.def.name == def.name)
            {
                return Err(Error::Invalid(format!(
                    "schedule {:?} is declared twice",
                    def.name
                )));
            }
            let (spec, tz) = def.validate()?;
            let next_fire_at = spec.next_after(now, &tz, now);
            schedules.push(DeclaredSchedule { def, next_fire_at });
        }
        let report = self
            .inner
            .store
            .schedule_sync(ScheduleSyncParams {
                group: group.to_string(),
                schedules,
                now,
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(report)
    }

    pub async fn schedule(&self, name: &str) -> Result<Schedule> {
        Ok(self.inner.store.schedule_get(name).await?)
    }

    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        Ok(self.inner.store.schedule_list().await?)
    }

    pub async fn schedule_delete(&self, name: &str) -> Result<()> {
        if self.inner.store.schedule_delete(name).await? {
            Ok(())
        } else {
            Err(StoreError::schedule_not_found(name).into())
        }
    }

    pub async fn schedule_pause(&self, name: &str, paused: bool) -> Result<Schedule> {
        let now = self.now();
        let next_fire_at = if paused {
            None
        } else {
            // Resuming does not catch up the paused time: the next occurrence from now.
            let s = self.inner.store.schedule_get(name).await?;
            let spec = Spec::parse(&s.spec)?;
            spec.next_after(now, &parse_zone(&s.tz)?, s.anchor_at)
        };
        let s = self
            .inner
            .store
            .schedule_set_paused(SchedulePauseParams {
                name: name.into(),
                paused,
                next_fire_at,
                now,
            })
            .await?;
        self.inner.schedules_changed.notify_waiters();
        Ok(s)
    }

    /// Enqueues a run of the schedule now, outside its spec (recorded in its ledger).
    pub async fn schedule_trigger(&self, name: &str) -> Result<TaskId> {
        let s = self.inner.store.schedule_get(name).await?;
        let now = self.now();
        let plan = sked_core::Plan {
            occurrences: vec![sked_core::PlannedOccurrence {
                nominal_at: now,
                outcome: sked_core::OccurrenceOutcome::Enqueued,
                detail: Some("triggered by hand".into()),
            }],
            cancel: vec![],
            buffered: s.buffered_at,
            next_fire_at: s.next_fire_at,
        };
        let ids = self
            .inner
            .store
            .schedule_apply(ScheduleApplyParams {
                name: name.into(),
                expected_next_fire_at: s.next_fire_at,
                plan,
                task: s.task.clone(),
                now,
            })
            .await?;
        self.inner.metrics.enqueued(&s.task.queue, ids.len());
        self.wake_workers();
        ids.into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("nothing was enqueued".into()))
    }

    pub async fn occurrences(&self, name: &str, limit: u32) -> Result<Vec<Occurrence>> {
        self.inner.store.schedule_get(name).await?;
        Ok(self
            .inner
            .store
            .occurrence_list(OccurrenceListParams {
                schedule: name.into(),
                limit,
            })
            .await?)
    }

    /// One materialisation pass at the engine's `now`: every due occurrence of every schedule
    /// becomes a task or a ledger line. Returns the ids of the tasks enqueued. Leader-only in
    /// normal operation; safe anywhere, since the store applies each plan at most once.
    pub async fn materialise(&self) -> Result<Vec<TaskId>> {
        let now = self.now();
        let due = self
            .inner
            .store
            .schedule_due(ScheduleDueParams { now, limit: 1000 })
            .await?;
        let mut enqueued = Vec::new();
        for DueSchedule {
            schedule: s,
            active_tasks,
        } in due
        {
            let (spec, tz) = match (Spec::parse(&s.spec), parse_zone(&s.tz)) {
                (Ok(spec), Ok(tz)) => (spec, tz),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(schedule = %s.name, error = %e, "schedule cannot be evaluated");
                    continue;
                }
            };
            let input = PlanInput {
                spec: &spec,
                tz: &tz,
                anchor: s.anchor_at,
                next_fire_at: s.next_fire_at,
                overlap: s.overlap,
                catchup: s.catchup,
                catchup_window: s.catchup_window,
                misfire_grace: self.inner.config.misfire_grace,
                active_tasks: &active_tasks,
                buffered: s.buffered_at,
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
            match self
                .inner
                .store
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
                    self.inner.metrics.enqueued(&s.task.queue, ids.len());
                    for o in outcomes {
                        self.inner.metrics.occurrence(o);
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
            self.wake_workers();
        }
        Ok(enqueued)
    }

    /// Re-queues tasks whose lease expired. Leader-only in normal operation.
    pub async fn rescue(&self) -> Result<Vec<TaskId>> {
        let ids = self
            .inner
            .store
            .task_rescue(TaskRescueParams {
                now: self.now(),
                limit: 1000,
            })
            .await?;
        if !ids.is_empty() {
            self.inner.metrics.rescued(ids.len());
            tracing::info!(count = ids.len(), "rescued tasks with expired leases");
            self.wake_workers();
            self.inner.schedules_changed.notify_waiters();
        }
        Ok(ids)
    }

    /// Deletes finished tasks older than the retention period. Leader-only in normal operation.
    pub async fn prune(&self) -> Result<u64> {
        // Workers and nodes gone for a week are forgotten.
        let week = SignedDuration::from_hours(24 * 7);
        if let Ok(cut) = self.now().checked_sub(week) {
            self.inner.store.worker_prune(cut).await?;
        }
        let cutoff = self
            .now()
            .checked_sub(self.inner.config.retention)
            .unwrap_or(Timestamp::MIN);
        Ok(self
            .inner
            .store
            .task_prune(TaskPruneParams {
                finished_before: cutoff,
                limit: 10_000,
            })
            .await?)
    }
}

impl Inner {
    fn wake_workers(&self) {
        self.work_epoch.fetch_add(1, Ordering::AcqRel);
        self.tasks_changed.notify_waiters();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns the store's announcements into this engine's wake-ups, until the engine is dropped.
async fn follow_announcements(
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

/// How many of `tasks` go to each queue (a batch is nearly always one queue).
fn enqueued_per_queue(tasks: &[NewTask]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for t in tasks {
        match out.iter_mut().find(|(q, _)| *q == t.queue) {
            Some((_, n)) => *n += 1,
            None => out.push((t.queue.clone(), 1)),
        }
    }
    out
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
