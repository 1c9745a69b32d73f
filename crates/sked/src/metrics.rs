//! The engine's Prometheus metrics: what passed through this process (claims, endings,
//! latencies, rescues, schedule occurrences) as counters and histograms, plus gauges read from
//! the store at scrape time (tasks by queue and state, leadership).
//!
//! Counters and histograms are per process: in a cluster, sum them over nodes. The task gauges
//! come from the shared database, so every node reports the same numbers: take `max` over
//! nodes, not `sum`.

use jiff::{SignedDuration, Timestamp};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use sked_core::{Task, TaskState};
use sked_store::{FinishOutcome, TaskEnded};

/// How far `sked_tasks` counts each queue's tasks of one state: a scrape reads the counts
/// every time, and their cost is bounded by queues × states × this, however many tasks are kept.
/// A gauge at this value means "this many or more".
pub(crate) const COUNT_LIMIT: u64 = 100_000;

/// The most queues that have series of their own. The `sked_tasks` gauge covers the first
/// this many queues by name (`sked_queues_truncated` is 1 when there are more); counters and
/// histograms give their own series to the first this many queues this process sees, and add
/// the rest to queue [`OTHER_QUEUES`]. Queue names come from API users, so without a bound
/// the exposition (and this process's memory) would grow with every new name.
pub(crate) const QUEUE_SERIES_MAX: u32 = 1000;

/// The `queue` label of counters and histograms for queues past [`QUEUE_SERIES_MAX`]: a '/'
/// makes it a name no queue can have.
pub(crate) const OTHER_QUEUES: &str = "/other";

/// Bucket bounds in seconds, from 5 ms to an hour: a scheduler's latencies range from a
/// busy queue's milliseconds to a backlog's minutes, and run times from no-ops to long jobs.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

#[derive(Clone)]
pub(crate) struct Metrics {
    registry: Registry,
    enqueued: IntCounterVec,
    claimed: IntCounterVec,
    finished: IntCounterVec,
    wait: HistogramVec,
    lateness: HistogramVec,
    run_time: HistogramVec,
    rescued: IntCounter,
    expired: IntCounter,
    occurrences: IntCounterVec,
    tasks: IntGaugeVec,
    limits: LimitGauges,
    truncated: IntGauge,
    leader: IntGauge,
    labels: std::sync::Arc<QueueLabels>,
}

/// Queue limits, read from the store at scrape time like `sked_tasks`: each set limit, the
/// starts a rate window holds now, and what holds a queue's tasks back.
#[derive(Clone)]
struct LimitGauges {
    concurrency: IntGaugeVec,
    rate: IntGaugeVec,
    period: prometheus::GaugeVec,
    window: IntGaugeVec,
    held: IntGaugeVec,
    per_key: IntGaugeVec,
    per_key_rate: IntGaugeVec,
    per_key_period: prometheus::GaugeVec,
    keys_stopped: IntGaugeVec,
}

impl LimitGauges {
    fn new(r: &Registry) -> LimitGauges {
        let int = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
            r.register(Box::new(g.clone())).expect("unique metric");
            g
        };
        let period = prometheus::GaugeVec::new(
            Opts::new(
                "sked_queue_rate_period_seconds",
                "The window of a queue's rate limit",
            ),
            &["queue"],
        )
        .expect("valid metric");
        r.register(Box::new(period.clone())).expect("unique metric");
        let per_key_period = prometheus::GaugeVec::new(
            Opts::new(
                "sked_queue_per_key_rate_period_seconds",
                "The window of a queue's per-key rate limit",
            ),
            &["queue"],
        )
        .expect("valid metric");
        r.register(Box::new(per_key_period.clone()))
            .expect("unique metric");
        LimitGauges {
            per_key: int(
                "sked_queue_per_key_limit",
                "Most tasks of one concurrency key of a queue running at once, where limited",
                &["queue"],
            ),
            per_key_rate: int(
                "sked_queue_per_key_rate_limit",
                "Most tasks of one concurrency key of a queue started in any window of its period",
                &["queue"],
            ),
            per_key_period,
            keys_stopped: int(
                "sked_queue_keys_stopped",
                "In a queue with strict order per key, the keys whose next tasks wait for a \
                 dead task to be retried or deleted",
                &["queue"],
            ),
            concurrency: int(
                "sked_queue_concurrency_limit",
                "Most tasks of a queue running at once, where limited",
                &["queue"],
            ),
            rate: int(
                "sked_queue_rate_limit",
                "Most tasks of a queue started in any window of its period (burst included)",
                &["queue"],
            ),
            period,
            window: int(
                "sked_queue_rate_window_starts",
                "Tasks of a rate-limited queue started in the window that ends now",
                &["queue"],
            ),
            held: int(
                "sked_queue_held",
                "1 while a queue's available tasks wait, by what holds them: paused, \
                 concurrency or rate",
                &["queue", "by"],
            ),
        }
    }

    fn set(&self, queues: &[sked_store::QueueInfo]) {
        for g in [
            &self.concurrency,
            &self.rate,
            &self.window,
            &self.held,
            &self.per_key,
            &self.per_key_rate,
            &self.keys_stopped,
        ] {
            g.reset();
        }
        self.period.reset();
        self.per_key_period.reset();
        for q in queues {
            let name = q.name.as_str();
            if let Some(limit) = q.concurrency_limit {
                self.concurrency
                    .with_label_values(&[name])
                    .set(i64::from(limit));
            }
            if let Some(rate) = q.rate {
                let most = i64::from(rate.limit) + i64::from(rate.burst);
                self.rate.with_label_values(&[name]).set(most);
                self.period
                    .with_label_values(&[name])
                    .set(rate.period.as_secs_f64());
                let n = q.rate_window.unwrap_or(0);
                self.window
                    .with_label_values(&[name])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            if let Some(n) = q.per_key {
                self.per_key.with_label_values(&[name]).set(i64::from(n));
            }
            if let Some(rate) = q.per_key_rate {
                self.per_key_rate
                    .with_label_values(&[name])
                    .set(i64::from(rate.limit));
                self.per_key_period
                    .with_label_values(&[name])
                    .set(rate.period.as_secs_f64());
            }
            if let Some(n) = q.keys_stopped {
                self.keys_stopped
                    .with_label_values(&[name])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
            if let Some(held) = q.held {
                self.held
                    .with_label_values(&[name, held.by.as_str()])
                    .set(1);
            }
        }
    }
}

/// The queues that have series of their own in counters and histograms.
#[derive(Default)]
struct QueueLabels(std::sync::RwLock<std::collections::HashSet<String>>);

impl QueueLabels {
    /// The `queue` label for a queue: its name while there is room, else [`OTHER_QUEUES`].
    fn label<'a>(&self, queue: &'a str) -> &'a str {
        let read = self.0.read().unwrap_or_else(|e| e.into_inner());
        if read.contains(queue) {
            return queue;
        }
        drop(read);
        let mut known = self.0.write().unwrap_or_else(|e| e.into_inner());
        if known.contains(queue) || known.len() < QUEUE_SERIES_MAX as usize {
            known.insert(queue.to_string());
            queue
        } else {
            OTHER_QUEUES
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

fn histogram(registry: &Registry, name: &str, help: &str) -> HistogramVec {
    let h = HistogramVec::new(
        HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()),
        &["queue"],
    )
    .expect("valid metric");
    registry
        .register(Box::new(h.clone()))
        .expect("unique metric");
    h
}

fn seconds(d: SignedDuration) -> f64 {
    d.as_secs_f64().max(0.0)
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let r = Registry::new();
        let rescued = IntCounter::new(
            "sked_rescued_total",
            "Tasks whose lease expired and were taken back",
        )
        .expect("valid metric");
        r.register(Box::new(rescued.clone()))
            .expect("unique metric");
        let expired = IntCounter::new(
            "sked_expired_total",
            "Tasks not started by their deadline, ended expired",
        )
        .expect("valid metric");
        r.register(Box::new(expired.clone()))
            .expect("unique metric");
        let tasks = IntGaugeVec::new(
            Opts::new(
                "sked_tasks",
                format!(
                    "Tasks in the database by queue and state, counted up to {COUNT_LIMIT} \
                     (the same on every node)"
                ),
            ),
            &["queue", "state"],
        )
        .expect("valid metric");
        r.register(Box::new(tasks.clone())).expect("unique metric");
        let truncated = IntGauge::new(
            "sked_queues_truncated",
            format!(
                "1 when more queues exist than sked_tasks reports (the first \
                 {QUEUE_SERIES_MAX} by name)"
            ),
        )
        .expect("valid metric");
        r.register(Box::new(truncated.clone()))
            .expect("unique metric");
        let leader = IntGauge::new("sked_leader", "1 while this node holds the leader lease")
            .expect("valid metric");
        r.register(Box::new(leader.clone())).expect("unique metric");
        Metrics {
            enqueued: counter(&r, "sked_enqueued_total", "Tasks enqueued", &["queue"]),
            claimed: counter(
                &r,
                "sked_claimed_total",
                "Tasks claimed by workers",
                &["queue"],
            ),
            finished: counter(
                &r,
                "sked_finished_total",
                "Attempts ended, by outcome: succeeded, failed (to be retried), dead, cancelled, \
                 snoozed, released",
                &["queue", "outcome"],
            ),
            wait: histogram(
                &r,
                "sked_enqueue_to_start_seconds",
                "From enqueue to the start of the first attempt",
            ),
            lateness: histogram(
                &r,
                "sked_due_to_start_seconds",
                "From the time an attempt was due to its start",
            ),
            run_time: histogram(
                &r,
                "sked_run_seconds",
                "Run time of attempts that ended (not released ones)",
            ),
            rescued,
            expired,
            occurrences: counter(
                &r,
                "sked_schedule_occurrences_total",
                "Schedule occurrences by outcome: enqueued, skipped, buffered, missed",
                &["outcome"],
            ),
            tasks,
            limits: LimitGauges::new(&r),
            truncated,
            leader,
            labels: std::sync::Arc::default(),
            registry: r,
        }
    }

    pub(crate) fn enqueued(&self, queue: &str, n: usize) {
        self.enqueued
            .with_label_values(&[self.labels.label(queue)])
            .inc_by(n as u64);
    }

    pub(crate) fn claimed(&self, tasks: &[Task], now: Timestamp) {
        // A claim is nearly always one queue: look the queue's series up once per run of it,
        // not three times per task.
        for run in tasks.chunk_by(|a, b| a.queue == b.queue) {
            let queue = [self.labels.label(&run[0].queue)];
            self.claimed
                .with_label_values(&queue)
                .inc_by(run.len() as u64);
            let (wait, lateness) = (
                self.wait.with_label_values(&queue),
                self.lateness.with_label_values(&queue),
            );
            for t in run {
                if t.attempt == 1 {
                    wait.observe(seconds(now.duration_since(t.created_at)));
                }
                lateness.observe(seconds(now.duration_since(t.run_at)));
            }
        }
    }

    pub(crate) fn finished(&self, task: &TaskEnded, outcome: &FinishOutcome, now: Timestamp) {
        let label = match outcome {
            FinishOutcome::Succeeded { .. } => "succeeded",
            FinishOutcome::Failed { .. } if task.state == TaskState::Dead => "dead",
            FinishOutcome::Failed { .. } => "failed",
            FinishOutcome::Snoozed { .. } => "snoozed",
            FinishOutcome::Cancelled => "cancelled",
            FinishOutcome::Released => "released",
        };
        let queue = self.labels.label(&task.queue);
        self.finished.with_label_values(&[queue, label]).inc();
        if !matches!(outcome, FinishOutcome::Released)
            && let Some(started) = task.started_at
        {
            self.run_time
                .with_label_values(&[queue])
                .observe(seconds(now.duration_since(started)));
        }
    }

    pub(crate) fn rescued(&self, n: usize) {
        self.rescued.inc_by(n as u64);
    }

    pub(crate) fn expired(&self, n: usize) {
        self.expired.inc_by(n as u64);
    }

    pub(crate) fn occurrence(&self, outcome: &str) {
        self.occurrences.with_label_values(&[outcome]).inc();
    }

    /// The text exposition, after setting the gauges from a page of the store's queues: every
    /// state of every queue in it, zeros included, so a count that drops to nothing reads 0.
    pub(crate) fn render(
        &self,
        queues: &sked_store::Page<sked_store::QueueInfo>,
        leader: bool,
    ) -> String {
        self.tasks.reset();
        self.truncated.set(i64::from(queues.more));
        for q in &queues.items {
            for state in TaskState::ALL {
                let n = q.counts.get(&state).copied().unwrap_or(0);
                self.tasks
                    .with_label_values(&[q.name.as_str(), state.as_str()])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        self.limits.set(&queues.items);
        self.leader.set(i64::from(leader));
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding into a Vec does not fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}
