//! `sked bench`: measures the store and engine in-process with no-op tasks and prints one JSON
//! line. Workloads:
//! - `enqueue`: bulk enqueue rate, in batches of `-c` tasks per transaction;
//! - `drain`: pre-insert `-n` tasks, then the time until all have succeeded, claimed in batches
//!   and completed in batches by `-c` concurrent no-op workers (`--observers R`: while R
//!   readers poll the queues' counts and the newest tasks, every 10 ms or `--observe-every`,
//!   as clients and dashboards do);
//! - `latency`: `-n` sequential enqueue→start samples with an idle worker waiting;
//! - `lateness`: due-time→start of `-n` tasks due over a short window;
//! - `worker`: pre-insert `-n` tasks, then the time until the Rust worker (no-op handler,
//!   concurrency `-c`, by default the drain's claim size) has ended them all, embedded on the
//!   store;
//! - `remote-worker`: the same worker over HTTP, against a server in this process on a
//!   loopback port (batched claims, heartbeats and endings);
//! - `counts`: pre-insert and drain `-n` tasks, then the time to read the queue counts (what
//!   the dashboard, `sked top` and /metrics read every few seconds) at the dashboard's
//!   counting limit, at /metrics' and counting everything;
//! - `idle`: a whole node (leader duties and a worker) with nothing to do for `-n` seconds:
//!   how many store operations it runs, and (PostgreSQL) how many transactions the server saw;
//! - `schedules`: `-n` schedules of `--spec` created in bulk, then `--nodes` nodes planning
//!   them with `-c` no-op workers each for `--duration`: per occurrence second the tasks made
//!   and missed and how late they were claimable and started (see `schedules.rs`).
//!
//! With `--db postgres://…` each run works in a scratch schema of its own, dropped at the end.
//!
//! `--backlog N` first inserts N far-future tasks (for `drain` and `lateness`), to show that
//! they cost nothing per claim.
//!
//! Files: `throughput` (enqueue, drain, worker), `latency` (latency, lateness), `node`
//! (counts, idle), `ceiling`; here the command, its arguments and what the workloads share.

mod ceiling;
mod latency;
mod node;
mod schedules;
mod soak;
mod throughput;

use ceiling::{ceiling, ceiling_per_s, hold_snapshot};
use latency::{latency, lateness};
use node::{counts, idle};
use schedules::{SchedulesPlan, schedules};
use soak::{SoakPlan, soak};
use throughput::{Spread, drain, enqueue, worker, workflow};

use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use jiff::SignedDuration;
use serde_json::json;
use sked::store::bench::CeilingWorkload;
use sked::store::{FinishOutcome, TaskFinishParams, TaskInsert, TaskInsertParams};
use sked::{MaintenanceConfig, Node, Store};
use sked_core::{NewTask, TaskState};

use crate::{CliError, CliResult};

/// Tasks per enqueue transaction, unless `-c` says otherwise.
const ENQUEUE_BATCH: usize = 1000;
/// Concurrent no-op workers of `drain`, unless `-c` says otherwise.
const DRAIN_WORKERS: usize = 4;
/// Tasks per claim in `drain`.
pub(super) const CLAIM_BATCH: usize = 1000;
/// The Rust worker's concurrency in `worker`, unless `-c` says otherwise: its claims then
/// bring as many tasks as the drain's, so the two differ only by what the worker adds.
const WORKER_CONCURRENCY: usize = CLAIM_BATCH;

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// Bulk enqueue rate, in batches of -c tasks per transaction
    Enqueue,
    /// Pre-insert -n tasks, then the time until all have succeeded (-c no-op workers)
    Drain,
    /// A workflow 1 → -n → 1 made with one request, then run by -c no-op workers: the time
    /// from the request to the last task's success
    Workflow,
    /// -n sequential enqueue-to-start samples with an idle worker waiting
    Latency,
    /// -n tasks each waited for over HTTP while this node ends it: ending to answer
    Wait,
    /// Due-time-to-start of -n tasks due over a short window
    Lateness,
    /// A whole node with nothing to do for -n seconds: its store operations
    Idle,
    /// Queue counts over -n finished tasks
    Counts,
    /// The Rust worker (no-op handler, concurrency -c) ending -n tasks, embedded
    Worker,
    /// The same worker over HTTP, against a server in this process
    RemoteWorker,
    /// The bare SQL a queue needs, drain and insert, shaped as drain and enqueue run them
    Ceiling,
    /// A whole node (worker, maintenance) enqueued into at --rate for --duration: a line per
    /// --interval, then a summary of the first and last windows
    Soak,
    /// -n schedules of --spec made in bulk, planned by --nodes nodes with -c no-op workers each
    /// for --duration: a line per occurrence second (made, missed, lateness), then a summary
    Schedules,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// What to measure (see `sked bench --help`)
    #[arg(value_enum)]
    workload: Workload,
    /// Database; default a new SQLite file in a temporary directory.
    #[arg(long)]
    db: Option<String>,
    /// Number of tasks (samples for latency).
    #[arg(short = 'n', default_value_t = 100_000)]
    n: usize,
    /// Batch size (enqueue) or concurrent workers (drain).
    #[arg(short = 'c', default_value_t = 0)]
    c: usize,
    /// Far-future tasks inserted first (drain, lateness).
    #[arg(long, default_value_t = 0)]
    backlog: usize,
    /// Enqueuers inserting batches at once, each on its own connection (enqueue).
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Also run the bare-SQL ceiling of the same shape and report the ratio (drain, enqueue);
    /// a drain also reports the ratio to the bare drain that keeps each outcome.
    #[arg(long)]
    vs_ceiling: bool,
    /// Hold a read snapshot open on a connection of its own for the whole run, as a long
    /// report or a forgotten `BEGIN` would (drain, enqueue, soak).
    #[arg(long)]
    hold_snapshot: bool,
    /// A rate limit on the drained queue, like 1000000/s (drain): one set high enough not to
    /// bind measures what keeping it costs the claims.
    #[arg(long, value_name = "N/PERIOD")]
    queue_rate: Option<String>,
    /// Queues the drained tasks are spread over, in turn (drain): the workers claim over every
    /// queue, as workers without `--queues` do.
    #[arg(long, default_value_t = 1)]
    queues: usize,
    /// Concurrency keys the drained tasks are spread over, in turn (drain): task i has key
    /// `k{i % N}`; 0 for none.
    #[arg(long, default_value_t = 0, value_name = "N")]
    keys: usize,
    /// A per-key limit on the drained queue (drain, with --keys): claims take keys in turn.
    #[arg(long, value_name = "N")]
    per_key: Option<u32>,
    /// The order of a key's tasks on the drained queue (drain, with --per-key 1): strict keeps
    /// a key for a task that started until it ends well.
    #[arg(long, value_name = "strict|priority")]
    order: Option<String>,
    /// Readers polling the queues' counts and the newest tasks meanwhile, as clients and
    /// dashboards do (drain).
    #[arg(long, default_value_t = 0)]
    observers: usize,
    /// How often each of the --observers polls (or as soon as its last poll answered, when
    /// that took longer).
    #[arg(long, default_value = "10ms", value_name = "DUR")]
    observe_every: String,
    /// Callers waiting meanwhile for tasks that do not end, parked as `task wait` parks them
    /// (worker, remote-worker).
    #[arg(long, default_value_t = 0)]
    waiters: usize,
    /// Tasks enqueued a second (soak).
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// How long to run (soak), e.g. 30m.
    #[arg(long, default_value = "1m")]
    duration: String,
    /// Between two progress lines (soak).
    #[arg(long, default_value = "10s")]
    interval: String,
    /// How long finished tasks are kept (soak).
    #[arg(long, default_value = "1m")]
    retention: String,
    /// The share of tasks that fail for good and end dead, in percent (soak).
    #[arg(long, default_value_t = 0, value_name = "PCT")]
    dead_share: u32,
    /// The soak queue's own retention of succeeded tasks (soak), instead of --retention.
    #[arg(long, value_name = "DUR")]
    retention_succeeded: Option<String>,
    /// The soak queue's own retention of dead tasks (soak), instead of --retention.
    #[arg(long, value_name = "DUR")]
    retention_dead: Option<String>,
    /// The schedules' spec (schedules): a cron expression or `every DUR`.
    #[arg(long, default_value = "*/10 * * * * *")]
    spec: String,
    /// The schedules' overlap policy (schedules).
    #[arg(long, default_value = "skip")]
    overlap: String,
    /// Nodes planning and working the schedules, each with its own connections (schedules;
    /// more than one needs PostgreSQL).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

/// Maintenance as a node runs it, with the soak's retention, pruned twice per `shortest`
/// retention it keeps (at least every minute, at most every second) so that the tables stay
/// bounded by it.
fn soak_maintenance(retention: SignedDuration, shortest: SignedDuration) -> MaintenanceConfig {
    let mut config = MaintenanceConfig::default().retention(retention);
    let half = Duration::try_from(shortest / 2).unwrap_or(Duration::ZERO);
    config.pruner.interval = half.clamp(Duration::from_secs(1), Duration::from_secs(60));
    config
}

/// A positive duration option.
fn positive_duration(name: &str, value: &str) -> CliResult<Duration> {
    let d = sked_core::parse_duration(value)
        .map_err(|e| CliError::usage(format!("--{name} {value}: {e}")))?;
    match d.is_positive() {
        true => Duration::try_from(d).map_err(|e| CliError::usage(format!("--{name}: {e}"))),
        false => Err(CliError::usage(format!("--{name} must be more than zero"))),
    }
}

pub(crate) async fn run(a: BenchArgs) -> CliResult {
    if a.n == 0 {
        return Err(CliError::usage("-n must be at least 1"));
    }
    if a.vs_ceiling && !matches!(a.workload, Workload::Drain | Workload::Enqueue) {
        return Err(CliError::usage("--vs-ceiling applies to drain and enqueue"));
    }
    if a.hold_snapshot
        && !matches!(
            a.workload,
            Workload::Drain | Workload::Enqueue | Workload::Soak
        )
    {
        return Err(CliError::usage(
            "--hold-snapshot applies to drain, enqueue and soak",
        ));
    }
    let queue_rate = match (&a.queue_rate, &a.workload) {
        (None, _) => None,
        (Some(rate), Workload::Drain) => Some(
            rate.parse::<sked::RateLimit>()
                .map_err(|e| CliError::usage(format!("--queue-rate: {e}")))?,
        ),
        (Some(_), _) => return Err(CliError::usage("--queue-rate applies to drain")),
    };
    if a.queues == 0 {
        return Err(CliError::usage("--queues must be at least 1"));
    }
    if a.queues > 1 && !matches!(a.workload, Workload::Drain) {
        return Err(CliError::usage("--queues applies to drain"));
    }
    if (a.keys > 0 || a.per_key.is_some()) && !matches!(a.workload, Workload::Drain) {
        return Err(CliError::usage("--keys and --per-key apply to drain"));
    }
    let key_order = a
        .order
        .as_deref()
        .map(str::parse::<sked::store::KeyOrder>)
        .transpose()
        .map_err(|e| CliError::usage(format!("--order: {e}")))?;
    if key_order.is_some() && a.per_key.is_none() {
        return Err(CliError::usage("--order needs --per-key (1 for strict)"));
    }
    if a.per_key.is_some() && (a.keys == 0 || a.queues > 1) {
        return Err(CliError::usage(
            "--per-key limits the keys of the one drained queue: it needs --keys and does not \
             go with --queues",
        ));
    }
    if a.observers > 0 && !matches!(a.workload, Workload::Drain) {
        return Err(CliError::usage("--observers applies to drain"));
    }
    if a.waiters > 0 && !matches!(a.workload, Workload::Worker | Workload::RemoteWorker) {
        return Err(CliError::usage(
            "--waiters applies to worker and remote-worker: the drain ends tasks in the store, \
             past the engine that wakes waits",
        ));
    }
    let every = positive_duration("observe-every", &a.observe_every)?;
    if a.queues > 1 && queue_rate.is_some() {
        return Err(CliError::usage(
            "--queue-rate limits the one drained queue: it does not go with --queues",
        ));
    }
    let soak_plan = match a.workload {
        Workload::Soak => {
            let duration = positive_duration("duration", &a.duration)?;
            let interval = positive_duration("interval", &a.interval)?;
            if interval > duration {
                return Err(CliError::usage("--interval is longer than --duration"));
            }
            if a.rate == 0 {
                return Err(CliError::usage("--rate must be at least 1"));
            }
            if a.dead_share > 100 {
                return Err(CliError::usage("--dead-share is a percentage, at most 100"));
            }
            let keep = |flag: &str, v: &Option<String>| -> CliResult<Option<SignedDuration>> {
                v.as_deref()
                    .map(|d| {
                        positive_duration(flag, d)
                            .map(|d| SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX))
                    })
                    .transpose()
            };
            Some(SoakPlan {
                rate: a.rate,
                duration,
                interval,
                window: SoakPlan::window_for(duration),
                dead_share: a.dead_share,
                retention: [
                    (
                        TaskState::Succeeded,
                        keep("retention-succeeded", &a.retention_succeeded)?,
                    ),
                    (TaskState::Dead, keep("retention-dead", &a.retention_dead)?),
                ],
            })
        }
        _ => None,
    };
    if let Workload::Schedules = a.workload {
        return run_schedules(&a).await;
    }
    if a.nodes != 1 {
        return Err(CliError::usage("--nodes applies to schedules"));
    }
    let retention = sked_core::parse_duration(&a.retention)
        .map_err(|e| CliError::usage(format!("--retention {}: {e}", a.retention)))?;
    let tmp = TempDir::new().map_err(CliError::runtime)?;
    let url =
        a.db.clone()
            .unwrap_or_else(|| format!("sqlite://{}", tmp.path().join("bench.db").display()));
    let (store, scratch) = sked::open_scratch_store(&url, 8)
        .await
        .map_err(CliError::usage)?;
    if a.backlog > 0 {
        backlog(&store, a.backlog).await?;
    }
    if let Some(rate) = queue_rate {
        store
            .queue_update(sked::store::QueueUpdateParams {
                name: noop(0).queue,
                rate: Some(Some(rate)),
                ..Default::default()
            })
            .await
            .map_err(CliError::runtime)?;
    }
    if let Some(n) = a.per_key {
        store
            .queue_update(sked::store::QueueUpdateParams {
                name: noop(0).queue,
                per_key: Some(Some(n)),
                key_order,
                ..Default::default()
            })
            .await
            .map_err(CliError::usage)?;
    }
    // Measure from a steady state: no deferred work left from the set-up.
    let bench = scratch.bench.as_ref();
    bench.settle().await.map_err(CliError::runtime)?;
    if let Workload::Idle = a.workload {
        // A whole node of its own, and nothing else on the store.
        let mut line = idle(&store, bench, a.n).await?;
        line["backend"] = json!(store.backend());
        line["n"] = json!(a.n);
        out!("{line}");
        drop(store);
        drop(scratch);
        return Ok(());
    }
    // The engine alone, but for the soak: a node as it runs, pruning after a short retention.
    let node = match &soak_plan {
        Some(plan) => {
            // The queue's own retentions, and passes often enough for the shortest.
            let changes: Vec<_> = plan
                .retention
                .iter()
                .filter(|(_, k)| k.is_some())
                .copied()
                .collect();
            let shortest = changes
                .iter()
                .filter_map(|(_, k)| *k)
                .chain([retention])
                .min();
            if !changes.is_empty() {
                store
                    .queue_update(sked::store::QueueUpdateParams {
                        name: noop(0).queue,
                        retention: changes,
                        ..Default::default()
                    })
                    .await
                    .map_err(CliError::runtime)?;
            }
            Node::builder()
                .store(store.clone())
                .maintenance(soak_maintenance(retention, shortest.unwrap_or(retention)))
        }
        None => Node::builder().store(store.clone()).without_maintenance(),
    }
    .start()
    .await
    .map_err(CliError::runtime)?;
    let engine = node.engine().clone();
    let (batch, workers) = (
        if a.c == 0 { ENQUEUE_BATCH } else { a.c },
        if a.c == 0 { DRAIN_WORKERS } else { a.c },
    );
    let held = match a.hold_snapshot {
        true => Some(hold_snapshot(bench).await?),
        false => None,
    };
    let mut line = match a.workload {
        Workload::Enqueue => enqueue(&store, a.n, batch, a.parallel).await?,
        Workload::Drain => {
            let spread = Spread {
                queues: a.queues,
                keys: a.keys,
            };
            drain(&store, bench, a.n, workers, spread, a.observers, every).await?
        }
        Workload::Workflow => workflow(&store, &engine, bench, a.n, workers).await?,
        Workload::Ceiling => ceiling(bench, a.n, batch, a.parallel).await?,
        Workload::Latency => latency(&engine, a.n).await?,
        Workload::Wait => latency::wait(&engine, a.n).await?,
        Workload::Lateness => lateness(&engine, a.n).await?,
        Workload::Idle | Workload::Schedules => unreachable!("measured above"),
        Workload::Soak => match soak_plan {
            Some(ref plan) => soak(&engine, bench, plan).await?,
            None => unreachable!("planned above"),
        },
        Workload::Counts => counts(&store, bench, &engine, a.n).await?,
        Workload::Worker | Workload::RemoteWorker => {
            let remote = matches!(a.workload, Workload::RemoteWorker);
            let concurrency = if a.c == 0 { WORKER_CONCURRENCY } else { a.c };
            let parked = latency::park_waiters(&engine, a.waiters).await?;
            let mut line = worker(&engine, bench, a.n, concurrency, remote).await?;
            drop(parked);
            if a.waiters > 0 {
                line["waiters"] = json!(a.waiters);
            }
            line
        }
    };
    if let Some(held) = held {
        // Released before the ceiling runs: the ceiling stays the bare one.
        held.release().await.map_err(CliError::runtime)?;
        line["held_snapshot"] = json!(true);
    }
    if a.vs_ceiling {
        let shape = match a.workload {
            Workload::Drain => (CeilingWorkload::Drain, CLAIM_BATCH, workers),
            Workload::Enqueue => (CeilingWorkload::Insert, batch, a.parallel),
            _ => unreachable!("refused before the run"),
        };
        let ceiling = ceiling_per_s(bench, shape.0, a.n, shape.1, shape.2).await?;
        let per_s = line["per_s"].as_f64().unwrap_or_default();
        line["ceiling_per_s"] = json!(round(ceiling));
        line["ratio"] = json!(ratio(per_s, ceiling));
        if matches!(a.workload, Workload::Drain) {
            // The least a queue that keeps each outcome writes: a second, nearer ceiling.
            let kept =
                ceiling_per_s(bench, CeilingWorkload::DrainKept, a.n, CLAIM_BATCH, workers).await?;
            line["kept_ceiling_per_s"] = json!(round(kept));
            line["kept_ratio"] = json!(ratio(per_s, kept));
        }
    }
    line["backend"] = json!(store.backend());
    if soak_plan.is_none() {
        line["n"] = json!(a.n);
        line["backlog"] = json!(a.backlog);
    }
    if let Some(rate) = queue_rate {
        line["queue_rate"] = json!(rate.to_string());
    }
    if let Some(n) = a.per_key {
        line["per_key"] = json!(n);
    }
    if let Some(order) = key_order {
        line["key_order"] = json!(order.as_str());
    }
    out!("{line}");
    // Close every connection before the scratch schema is dropped.
    node.shutdown().await.map_err(CliError::runtime)?;
    drop((engine, store));
    drop(scratch);
    Ok(())
}

/// `sked bench schedules`: a line per occurrence second, then the summary.
async fn run_schedules(a: &BenchArgs) -> CliResult {
    let overlap: sked_core::OverlapPolicy = a
        .overlap
        .parse()
        .map_err(|e| CliError::usage(format!("--overlap {}: {e}", a.overlap)))?;
    sked_core::Spec::parse(&a.spec).map_err(|e| CliError::usage(format!("--spec: {e}")))?;
    if a.nodes == 0 {
        return Err(CliError::usage("--nodes must be at least 1"));
    }
    let tmp = TempDir::new().map_err(CliError::runtime)?;
    let url =
        a.db.clone()
            .unwrap_or_else(|| format!("sqlite://{}", tmp.path().join("bench.db").display()));
    if a.nodes > 1 && !url.starts_with("postgres") {
        return Err(CliError::usage(
            "--nodes above 1 needs --db postgres://…: nodes share a PostgreSQL database",
        ));
    }
    let plan = SchedulesPlan {
        n: a.n,
        spec: a.spec.clone(),
        duration: positive_duration("duration", &a.duration)?,
        workers: if a.c == 0 { DRAIN_WORKERS } else { a.c },
        overlap,
    };
    let (stores, scratch) = sked::open_scratch_stores(&url, 8, a.nodes)
        .await
        .map_err(CliError::usage)?;
    let backend = stores[0].backend();
    let lines = schedules(&stores, &plan).await?;
    for mut line in lines {
        line["backend"] = json!(backend);
        line["n"] = json!(a.n);
        line["overlap"] = json!(a.overlap);
        out!("{line}");
    }
    drop(stores);
    drop(scratch);
    Ok(())
}

/// A progress bar on stderr, drawn only when stderr is a terminal (the result line on stdout
/// stays clean). Counting costs an atomic add per batch, nothing per task.
pub(super) fn progress(len: usize, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>9} {bar:40} {pos}/{len} tasks  {per_sec}  eta {eta}",
        )
        .expect("a valid template"),
    );
    bar.set_message(what.to_string());
    bar
}

pub(super) fn noop(i: usize) -> NewTask {
    let mut t = NewTask::new("noop");
    t.payload = json!({"i": i});
    t
}

pub(super) async fn insert(store: &Arc<dyn Store>, tasks: Vec<NewTask>) -> CliResult {
    store
        .task_insert_many(TaskInsertParams {
            tasks: tasks.into_iter().map(TaskInsert::from).collect(),
            now: jiff::Timestamp::now(),
        })
        .await
        .map_err(CliError::runtime)?;
    Ok(())
}

async fn backlog(store: &Arc<dyn Store>, n: usize) -> CliResult {
    let far = jiff::Timestamp::now()
        .checked_add(SignedDuration::from_hours(24 * 365))
        .map_err(CliError::runtime)?;
    let bar = progress(n, "backlog");
    for start in (0..n).step_by(10_000) {
        let tasks: Vec<NewTask> = (start..n.min(start + 10_000))
            .map(|i| {
                let mut t = noop(i);
                t.run_at = Some(far);
                t
            })
            .collect();
        let len = tasks.len() as u64;
        insert(store, tasks).await?;
        bar.inc(len);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Completions for a batch of claimed no-op tasks, committed together by the caller.
pub(super) fn succeeded(tasks: &[sked_core::Task], now: jiff::Timestamp) -> Vec<TaskFinishParams> {
    tasks
        .iter()
        .map(|t| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now,
            jitter: 0.5,
        })
        .collect()
}

pub(super) fn summary(workload: &str, ms: Vec<f64>) -> serde_json::Value {
    let pct = percentiles(ms);
    json!({"workload": workload, "p50_ms": round(pct(0.5)), "p99_ms": round(pct(0.99)), "max_ms": round(pct(1.0))})
}

/// The percentiles of `samples` (at least one), as a function of the fraction wanted.
pub(super) fn percentiles(mut samples: Vec<f64>) -> impl Fn(f64) -> f64 {
    samples.sort_by(|a, b| a.total_cmp(b));
    move |p| samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

/// `per_s` over `ceiling`, to three places.
fn ratio(per_s: f64, ceiling: f64) -> f64 {
    (per_s / ceiling * 1000.0).round() / 1000.0
}

pub(super) fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A directory of its own under the system's temporary directory, removed when dropped: where
/// a benchmark without `--db` keeps its SQLite file.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        let path = std::env::temp_dir().join(format!(
            "sked-bench-{}-{:08x}",
            std::process::id(),
            unique_suffix()
        ));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A number unlikely to repeat between runs started in the same second by the same process id.
fn unique_suffix() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}
