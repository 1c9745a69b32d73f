//! Throughput: bulk enqueue, the store-level drain, the Rust worker embedded or over HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use serde_json::json;
use sked::store::bench::Bench;
use sked::store::{QueueListParams, TaskClaimParams, TaskListParams};
use sked::{Engine, Store};

use crate::{CliError, CliResult};

use super::{insert, noop, progress, round, succeeded};

pub(super) async fn enqueue(
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

/// How the drained tasks are spread: over queues (task i in `q{i % queues}` when there are
/// several; else the default queue) and over concurrency keys (task i with key `k{i % keys}`;
/// none when `keys` is 0).
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    pub queues: usize,
    pub keys: usize,
}

pub(super) async fn drain(
    store: &Arc<dyn Store>,
    bench: &dyn Bench,
    n: usize,
    workers: usize,
    spread: Spread,
    observers: usize,
    every: Duration,
) -> CliResult<serde_json::Value> {
    let Spread { queues, keys } = spread;
    let setup = progress(n, "insert");
    let task = |i: usize| {
        let mut t = noop(i);
        if queues > 1 {
            t.queue = format!("q{}", i % queues);
        }
        if keys > 0 {
            t.key = Some(format!("k{}", i % keys));
        }
        t
    };
    for start in (0..n).step_by(10_000) {
        let end = n.min(start + 10_000);
        insert(store, (start..end).map(task).collect()).await?;
        setup.inc((end - start) as u64);
    }
    setup.finish_and_clear();
    bench.settle().await.map_err(CliError::runtime)?;
    let bar = progress(n, "drain");
    let started = Instant::now();
    let watching = Observers::start(store, observers, every);
    let mut handles = Vec::new();
    // Every worker's endings: with keys, a claim may find nothing while other workers hold
    // every key that has tasks left, and its worker claims again until all have ended.
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for w in 0..workers {
        let (store, bar, ended) = (store.clone(), bar.clone(), ended.clone());
        handles.push(tokio::spawn(async move {
            let mut done = 0usize;
            // The queues this worker's claims took tasks from, when there are several.
            let mut seen = std::collections::HashSet::new();
            loop {
                let now = jiff::Timestamp::now();
                let claimed = store.task_claim(bench_claim(w, now)).await?;
                if claimed.is_empty() {
                    if keys > 0 && ended.load(std::sync::atomic::Ordering::Relaxed) < n {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                    return Ok::<_, sked::store::StoreError>((done, seen));
                }
                if queues > 1 {
                    // A copy of each queue's name once, not of every task's.
                    for t in &claimed {
                        if !seen.contains(&t.queue) {
                            seen.insert(t.queue.clone());
                        }
                    }
                }
                for r in store
                    .task_finish_many_lean(succeeded(&claimed, now))
                    .await?
                {
                    r?;
                    done += 1;
                }
                ended.fetch_add(claimed.len(), std::sync::atomic::Ordering::Relaxed);
                bar.inc(claimed.len() as u64);
            }
        }));
    }
    let (mut total, mut claimed_from) = (0, std::collections::HashSet::new());
    for h in handles {
        let (done, seen) = h
            .await
            .map_err(CliError::runtime)?
            .map_err(CliError::runtime)?;
        total += done;
        claimed_from.extend(seen);
    }
    let secs = started.elapsed().as_secs_f64();
    let polls = watching.stop().await?;
    bar.finish_and_clear();
    if total != n {
        return Err(CliError::runtime(format!(
            "drained {total} tasks, expected {n}"
        )));
    }
    let mut line = json!({"workload": "drain", "workers": workers, "queues": queues, "keys": keys,
        "per_s": round(n as f64 / secs), "secs": round(secs)});
    if queues > 1 {
        line["claimed_from_queues"] = json!(claimed_from.len());
    }
    if observers > 0 {
        line["observers"] = json!(observers);
        line["observe_every_ms"] = json!(every.as_millis() as u64);
        line["observer_polls_per_s"] = json!(round(polls.len() as f64 / secs));
        let pct = super::percentiles(polls);
        line["observer_poll_p50_ms"] = json!(round(pct(0.5)));
        line["observer_poll_p99_ms"] = json!(round(pct(0.99)));
    }
    Ok(line)
}

/// Readers that poll what a dashboard shows (the queues with their counts, the newest tasks)
/// while a workload runs, each at a pace (or as soon as its last poll answered, when that took
/// longer), as clients and dashboards do.
struct Observers {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Result<Vec<f64>, sked::store::StoreError>>>,
}

impl Observers {
    fn start(store: &Arc<dyn Store>, n: usize, every: Duration) -> Observers {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let handles = (0..n)
            .map(|_| {
                let (store, stop) = (store.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut polls = Vec::new();
                    let mut pace = tokio::time::interval(every);
                    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    // At least one poll, however short the workload.
                    loop {
                        pace.tick().await;
                        let started = Instant::now();
                        store
                            .queue_list(QueueListParams {
                                after: None,
                                limit: 100,
                                count_limit: sked::store::QUEUE_COUNT_LIMIT,
                                now: jiff::Timestamp::now(),
                            })
                            .await?;
                        store
                            .task_list(TaskListParams {
                                limit: 50,
                                ..Default::default()
                            })
                            .await?;
                        polls.push(started.elapsed().as_secs_f64() * 1000.0);
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            return Ok(polls);
                        }
                    }
                })
            })
            .collect();
        Observers { stop, handles }
    }

    /// Stops the readers; how long each poll (two reads) took, in milliseconds.
    async fn stop(self) -> CliResult<Vec<f64>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut polls = Vec::new();
        for h in self.handles {
            polls.extend(
                h.await
                    .map_err(CliError::runtime)?
                    .map_err(CliError::runtime)?,
            );
        }
        Ok(polls)
    }
}

/// The Rust worker with a no-op handler drains `n` pre-inserted tasks, embedded or over HTTP.
pub(super) async fn worker(
    engine: &Engine,
    bench: &dyn Bench,
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
    bench.settle().await.map_err(CliError::runtime)?;
    let client = if remote {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(CliError::runtime)?;
        let url = format!(
            "http://{}",
            listener.local_addr().map_err(CliError::runtime)?
        );
        let state = sked_server::AppState::new(engine.clone());
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

/// A no-op worker's claim over every queue, `CLAIM_BATCH` tasks at most.
fn bench_claim(w: usize, now: jiff::Timestamp) -> TaskClaimParams {
    TaskClaimParams {
        min_priority: None,
        queues: vec![],
        kinds: vec![],
        max: super::CLAIM_BATCH as u32,
        worker: format!("bench-{w}"),
        lease_ttl: SignedDuration::from_secs(60),
        timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
        now,
    }
}

/// A workflow 1 → `n` → 1 (a root, `n` tasks after it, one task after all of them): made with
/// one request, then run by `workers` no-op workers as the drain runs tasks. Measured from the
/// request to the last task's success, so its rate counts the making too.
pub(super) async fn workflow(
    store: &Arc<dyn Store>,
    engine: &Engine,
    bench: &dyn Bench,
    n: usize,
    workers: usize,
) -> CliResult<serde_json::Value> {
    use sked::{NewWorkflow, WorkflowTask};
    let middle: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    let mut tasks = Vec::with_capacity(n + 2);
    tasks.push(WorkflowTask::new("root", noop(0), Vec::<String>::new()));
    tasks.extend((0..n).map(|i| WorkflowTask::new(middle[i].clone(), noop(i + 1), ["root"])));
    tasks.push(WorkflowTask::new("last", noop(n + 1), middle));
    let total = n + 2;
    bench.settle().await.map_err(CliError::runtime)?;
    let bar = progress(total, "workflow");
    let started = Instant::now();
    let made = engine
        .workflow_create(NewWorkflow::new(tasks))
        .await
        .map_err(CliError::runtime)?;
    let made_secs = started.elapsed().as_secs_f64();
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(total));
    let mut handles = Vec::new();
    for w in 0..workers {
        let (store, bar, left) = (store.clone(), bar.clone(), left.clone());
        handles.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering;
            while left.load(Ordering::Acquire) > 0 {
                let now = jiff::Timestamp::now();
                let claimed = store.task_claim(bench_claim(w, now)).await?;
                if claimed.is_empty() {
                    // What is left waits for tasks another worker holds.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                for r in store
                    .task_finish_many_lean(succeeded(&claimed, now))
                    .await?
                {
                    r?;
                }
                left.fetch_sub(claimed.len(), Ordering::AcqRel);
                bar.inc(claimed.len() as u64);
            }
            Ok::<_, sked::store::StoreError>(())
        }));
    }
    for h in handles {
        h.await
            .map_err(CliError::runtime)?
            .map_err(CliError::runtime)?;
    }
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let w = engine.workflow(made.id).await.map_err(CliError::runtime)?;
    if w.state != sked::WorkflowState::Succeeded {
        return Err(CliError::runtime(format!(
            "the workflow ended {}: {:?}",
            w.state.as_str(),
            w.counts
        )));
    }
    Ok(
        json!({"workload": "workflow", "fan_out": n, "workers": workers,
        "per_s": round(total as f64 / secs), "secs": round(secs), "made_secs": round(made_secs)}),
    )
}
