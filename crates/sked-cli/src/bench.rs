//! `sked bench`: measures the store and engine in-process with no-op tasks and prints one JSON
//! line. Workloads:
//! - `enqueue`: bulk enqueue rate, in batches of `-c` tasks per transaction;
//! - `drain`: pre-insert `-n` tasks, then the time until all have succeeded, claimed in batches
//!   and completed in batches by `-c` concurrent no-op workers;
//! - `latency`: `-n` sequential enqueue→start samples with an idle worker waiting;
//! - `lateness`: due-time→start of `-n` tasks due over a short window;
//! - `worker`: pre-insert `-n` tasks, then the time until the Rust worker (no-op handler,
//!   concurrency `-c`) has ended them all, embedded on the store;
//! - `remote-worker`: the same worker over HTTP, against a server in this process on a
//!   loopback port (batched claims, heartbeats and endings);
//! - `counts`: pre-insert and drain `-n` tasks, then the time to read the queue counts (what
//!   the dashboard, `sked top` and /metrics read every few seconds) at the dashboard's
//!   counting limit, at /metrics' and counting everything;
//! - `idle`: a whole node (leader duties and a worker) with nothing to do for `-n` seconds:
//!   how many store operations it runs, and (PostgreSQL) how many transactions the server saw.
//!
//! With `--db postgres://…` each run works in a scratch schema of its own, dropped at the end.
//!
//! `--backlog N` first inserts N far-future tasks (for `drain` and `lateness`), to show that
//! they cost nothing per claim.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use jiff::SignedDuration;
use serde_json::json;
use sked::store::{
    Diagnostics, FinishOutcome, TaskClaimParams, TaskFinishParams, TaskInsert, TaskInsertParams,
};
use sked::{ClaimRequest, Engine, Node, Store};
use sked_core::NewTask;

use crate::{CliError, CliResult};

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    /// Bulk enqueue rate, in batches of -c tasks per transaction
    Enqueue,
    /// Pre-insert -n tasks, then the time until all have succeeded (-c no-op workers)
    Drain,
    /// -n sequential enqueue-to-start samples with an idle worker waiting
    Latency,
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
}

pub(crate) async fn run(a: BenchArgs) -> CliResult {
    if a.n == 0 {
        return Err(CliError::usage("-n must be at least 1"));
    }
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
    // Measure from a steady state: no deferred work left from the set-up.
    store.settle().await.map_err(CliError::runtime)?;
    if let Workload::Idle = a.workload {
        // A whole node of its own, and nothing else on the store.
        let mut line = idle(&store, a.n).await?;
        line["backend"] = json!(store.backend());
        line["n"] = json!(a.n);
        out!("{line}");
        drop(store);
        drop(scratch);
        return Ok(());
    }
    // The engine alone: the workloads drive it (and the store) directly.
    let node = Node::builder()
        .store(store.clone())
        .without_maintenance()
        .start()
        .await
        .map_err(CliError::runtime)?;
    let engine = node.engine().clone();
    let line = match a.workload {
        Workload::Enqueue => {
            enqueue(&store, a.n, if a.c == 0 { 1000 } else { a.c }, a.parallel).await?
        }
        Workload::Drain => drain(&store, a.n, if a.c == 0 { 4 } else { a.c }).await?,
        Workload::Latency => latency(&engine, a.n).await?,
        Workload::Lateness => lateness(&engine, a.n).await?,
        Workload::Idle => unreachable!("measured above"),
        Workload::Counts => counts(&store, &engine, a.n).await?,
        Workload::Worker => worker(&engine, a.n, if a.c == 0 { 256 } else { a.c }, false).await?,
        Workload::RemoteWorker => {
            worker(&engine, a.n, if a.c == 0 { 256 } else { a.c }, true).await?
        }
    };
    let mut line = line;
    line["backend"] = json!(store.backend());
    line["n"] = json!(a.n);
    line["backlog"] = json!(a.backlog);
    out!("{line}");
    // Close every connection before the scratch schema is dropped.
    node.shutdown().await.map_err(CliError::runtime)?;
    drop((engine, store));
    drop(scratch);
    Ok(())
}

/// A progress bar on stderr, drawn only when stderr is a terminal (the result line on stdout
/// stays clean). Counting costs an atomic add per batch, nothing per task.
fn progress(len: usize, what: &str) -> indicatif::ProgressBar {
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

fn noop(i: usize) -> NewTask {
    let mut t = NewTask::new("noop");
    t.payload = json!({"i": i});
    t
}

async fn insert(store: &Arc<dyn Store>, tasks: Vec<NewTask>) -> CliResult {
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

async fn enqueue(
    store: &Arc<dyn Store>,
    n: usize,
    batch: usize,
    parallel: usize,
) -> CliResult<serde_json::Value> {
    let parallel = parallel.max(1);
    let bar = progress(n, "enqueue");
    let started = Instant::now();
    let mut enqueuers = tokio::task::JoinSet::new();
    for p in 0..parallel {
        let (store, bar) = (store.clone(), bar.clone());
        enqueuers.spawn(async move {
            // Enqueuer p takes every `parallel`-th batch.
            for start in (p * batch..n).step_by(batch * parallel) {
                let end = n.min(start + batch);
                insert(&store, (start..end).map(noop).collect()).await?;
                bar.inc((end - start) as u64);
            }
            Ok::<(), CliError>(())
        });
    }
    while let Some(r) = enqueuers.join_next().await {
        r.map_err(CliError::runtime)??;
    }
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(json!({
        "workload": "enqueue", "batch": batch, "parallel": parallel,
        "per_s": round(n as f64 / secs), "secs": round(secs)
    }))
}

async fn drain(store: &Arc<dyn Store>, n: usize, workers: usize) -> CliResult<serde_json::Value> {
    let setup = progress(n, "insert");
    for start in (0..n).step_by(10_000) {
        let end = n.min(start + 10_000);
        insert(store, (start..end).map(noop).collect()).await?;
        setup.inc((end - start) as u64);
    }
    setup.finish_and_clear();
    store.settle().await.map_err(CliError::runtime)?;
    let bar = progress(n, "drain");
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let (store, bar) = (store.clone(), bar.clone());
        handles.push(tokio::spawn(async move {
            let mut done = 0usize;
            loop {
                let now = jiff::Timestamp::now();
                let claimed = store
                    .task_claim(TaskClaimParams {
                        min_priority: None,
                        queues: vec![],
                        kinds: vec![],
                        max: 1000,
                        worker: format!("bench-{w}"),
                        lease_ttl: SignedDuration::from_secs(60),
                        now,
                    })
                    .await?;
                if claimed.is_empty() {
                    return Ok::<usize, sked::store::StoreError>(done);
                }
                for r in store.task_finish_many(succeeded(&claimed, now)).await? {
                    r?;
                    done += 1;
                }
                bar.inc(claimed.len() as u64);
            }
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h
            .await
            .map_err(CliError::runtime)?
            .map_err(CliError::runtime)?;
    }
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    if total != n {
        return Err(CliError::runtime(format!(
            "drained {total} tasks, expected {n}"
        )));
    }
    Ok(
        json!({"workload": "drain", "workers": workers, "per_s": round(n as f64 / secs), "secs": round(secs)}),
    )
}

/// The Rust worker with a no-op handler drains `n` pre-inserted tasks, embedded or over HTTP.
async fn worker(
    engine: &Engine,
    n: usize,
    concurrency: usize,
    remote: bool,
) -> CliResult<serde_json::Value> {
    use sked::worker::{HandlerResult, TaskContext, Worker};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let store = engine.store().clone();
    let setup = progress(n, "insert");
    for start in (0..n).step_by(10_000) {
        let end = n.min(start + 10_000);
        insert(&store, (start..end).map(noop).collect()).await?;
        setup.inc((end - start) as u64);
    }
    setup.finish_and_clear();
    store.settle().await.map_err(CliError::runtime)?;
    let client = if remote {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(CliError::runtime)?;
        let url = format!(
            "http://{}",
            listener.local_addr().map_err(CliError::runtime)?
        );
        let state = sked_server::AppState {
            engine: engine.clone(),
            token: None,
        };
        tokio::spawn(sked_server::serve(listener, state, std::future::pending()));
        sked::Client::remote(&url).map_err(CliError::runtime)?
    } else {
        sked::Client::embedded(engine.clone())
    };
    let done = Arc::new(AtomicUsize::new(0));
    let all_done = Arc::new(tokio::sync::Notify::new());
    let (d, a) = (done.clone(), all_done.clone());
    let w = Worker::new(client)
        .id("bench-worker")
        .concurrency(concurrency)
        .handle("noop", move |_ctx: TaskContext, _: serde_json::Value| {
            if d.fetch_add(1, Ordering::Relaxed) + 1 == n {
                a.notify_one();
            }
            async { HandlerResult::Ok(()) }
        });
    // The bar follows the handlers' counter from outside: nothing per task.
    let bar = progress(n, if remote { "remote" } else { "worker" });
    let ticker = {
        let (bar, done) = (bar.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                bar.set_position(done.load(Ordering::Relaxed) as u64);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    let report = w
        .run(async move { all_done.notified().await })
        .await
        .map_err(CliError::runtime)?;
    let secs = started.elapsed().as_secs_f64();
    ticker.abort();
    bar.finish_and_clear();
    // Counted exactly: the limit is what is expected.
    let succeeded: u64 = engine
        .queues(n as u64)
        .await
        .map_err(CliError::runtime)?
        .iter()
        .filter_map(|q| q.counts.get(&sked_core::TaskState::Succeeded))
        .sum();
    if report.succeeded != n as u64 || succeeded != n as u64 {
        return Err(CliError::runtime(format!(
            "the worker ended {} tasks and the store has {succeeded} succeeded, expected {n}",
            report.succeeded
        )));
    }
    Ok(json!({
        "workload": if remote { "remote-worker" } else { "worker" },
        "concurrency": concurrency, "per_s": round(n as f64 / secs), "secs": round(secs)
    }))
}

/// An idle worker long-polls; each sample enqueues one task and measures until it is claimed.
async fn latency(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let worker_engine = engine.clone();
    let worker = tokio::spawn(async move {
        loop {
            let req = ClaimRequest {
                worker: "bench".into(),
                max: 1,
                wait: Some(Duration::from_secs(5)),
                ..Default::default()
            };
            let Ok(tasks) = worker_engine.claim(req).await else {
                return;
            };
            let started = Instant::now();
            for t in tasks {
                if tx.send(started).is_err() {
                    return;
                }
                let _ = worker_engine
                    .finish(t.id, t.attempt, FinishOutcome::Succeeded { result: None })
                    .await;
            }
        }
    });
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        // Let the worker go idle (back in its long-poll) before each sample.
        tokio::time::sleep(Duration::from_millis(2)).await;
        let sent = Instant::now();
        engine.enqueue(noop(i)).await.map_err(CliError::runtime)?;
        let started = rx
            .recv()
            .await
            .ok_or_else(|| CliError::runtime("the worker stopped"))?;
        samples.push(started.duration_since(sent).as_secs_f64() * 1000.0);
    }
    worker.abort();
    Ok(summary("latency", samples))
}

/// Tasks due over the next two seconds; each one's lateness is its claim time minus its due time.
async fn lateness(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
    let base = jiff::Timestamp::now()
        .checked_add(SignedDuration::from_millis(500))
        .map_err(CliError::runtime)?;
    let window_ms = 2000i64;
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| {
            let mut t = noop(i);
            t.run_at = Some(
                base.checked_add(SignedDuration::from_millis(i as i64 * window_ms / n as i64))
                    .unwrap_or(base),
            );
            t
        })
        .collect();
    engine
        .enqueue_many(tasks)
        .await
        .map_err(CliError::runtime)?;
    let mut samples = Vec::with_capacity(n);
    while samples.len() < n {
        let req = ClaimRequest {
            worker: "bench".into(),
            max: 100,
            wait: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        let claimed = engine.claim(req).await.map_err(CliError::runtime)?;
        let now = jiff::Timestamp::now();
        for t in &claimed {
            samples.push(now.duration_since(t.run_at).as_secs_f64() * 1000.0);
        }
        let finishes = succeeded(&claimed, now);
        for r in engine
            .store()
            .task_finish_many(finishes)
            .await
            .map_err(CliError::runtime)?
        {
            r.map_err(CliError::runtime)?;
        }
    }
    Ok(summary("lateness", samples))
}

/// Queue counts over `n` finished tasks: the median of 5 reads at each counting limit, right
/// after the drain and, on PostgreSQL, again after a `VACUUM` (the drain leaves two dead index
/// entries per task until vacuum, which autovacuum runs soon after in normal operation).
async fn counts(store: &Arc<dyn Store>, engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
    drain(store, n, 4).await?;
    store.settle().await.map_err(CliError::runtime)?;
    let mut line = json!({"workload": "counts"});
    line["after_drain"] = read_counts(engine, n).await?;
    if let Some(diag) = store.diagnostics() {
        diag.vacuum_tasks().await.map_err(CliError::runtime)?;
        line["after_vacuum"] = read_counts(engine, n).await?;
        // What the counts cost before they were bounded: one GROUP BY over every task.
        let mut ms = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            diag.count_tasks_unbounded()
                .await
                .map_err(CliError::runtime)?;
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        line["after_vacuum"]["group_by_all_ms"] = json!(round(ms[2]));
    }
    Ok(line)
}

async fn read_counts(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
    let mut line = json!({});
    for (name, limit) in [
        ("dashboard_limit_ms", sked::store::QUEUE_COUNT_LIMIT),
        ("metrics_limit_ms", 100_000),
        ("exact_ms", sked::store::QUEUE_COUNT_LIMIT_MAX),
    ] {
        let mut ms = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let queues = engine.queues(limit).await.map_err(CliError::runtime)?;
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
            let succeeded: u64 = queues
                .iter()
                .filter_map(|q| q.counts.get(&sked_core::TaskState::Succeeded))
                .sum();
            if succeeded != (n as u64).min(limit) {
                return Err(CliError::runtime(format!(
                    "counted {succeeded} succeeded tasks with limit {limit}, expected {}",
                    (n as u64).min(limit)
                )));
            }
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        line[name] = json!(round(ms[2]));
    }
    Ok(line)
}

/// A node with nothing to do: leader duties and a worker waiting for tasks, for `secs` seconds
/// after a warm-up. Counts the store operations it runs and, on PostgreSQL, the transactions
/// the server committed meanwhile (all databases' sessions: run it on a quiet server).
async fn idle(store: &Arc<dyn Store>, secs: usize) -> CliResult<serde_json::Value> {
    let node = Node::builder()
        .store(store.clone())
        .worker(|w| {
            w.id("bench-idle")
                .executor(Arc::new(sked::executors::ShellExecutor))
        })
        .start()
        .await
        .map_err(CliError::runtime)?;
    let pg = store.diagnostics();
    // Warm up: leadership taken, first passes done, statements prepared on each connection;
    // then long enough for the backends to have published the warm-up's transaction counts
    // (an idle backend flushes them within 10 s), so they are not counted as the idle node's.
    tokio::time::sleep(Duration::from_secs(if pg.is_some() { 15 } else { 3 })).await;
    let ops_before = pg.map(|p| p.operations());
    let xacts_before = match pg {
        Some(p) => Some(server_transactions(p).await?),
        None => None,
    };
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs as u64)).await;
    let elapsed = started.elapsed().as_secs_f64();
    let xacts_after = match pg {
        Some(p) => Some(server_transactions(p).await?),
        None => None,
    };
    let ops = pg.map(|p| p.operations() - ops_before.unwrap_or(0));
    node.shutdown().await.map_err(CliError::runtime)?;
    let mut line = json!({"workload": "idle", "secs": round(elapsed), "leader": true});
    if let Some(ops) = ops {
        line["store_ops_per_s"] = json!(round(ops as f64 / elapsed));
    }
    if let (Some(a), Some(b)) = (xacts_before, xacts_after) {
        // The two readings are transactions too.
        line["server_xacts_per_s"] = json!(round((b - a - 1) as f64 / elapsed));
    }
    Ok(line)
}

async fn server_transactions(pg: &dyn Diagnostics) -> CliResult<i64> {
    pg.server_transactions().await.map_err(CliError::runtime)
}

/// Completions for a batch of claimed no-op tasks, committed together by the caller.
fn succeeded(tasks: &[sked_core::Task], now: jiff::Timestamp) -> Vec<TaskFinishParams> {
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

fn summary(workload: &str, mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| ms[((ms.len() as f64 - 1.0) * p).round() as usize];
    json!({"workload": workload, "p50_ms": round(pct(0.5)), "p99_ms": round(pct(0.99)), "max_ms": round(pct(1.0))})
}

fn round(x: f64) -> f64 {
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
