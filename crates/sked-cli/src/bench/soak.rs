//! The soak: a whole node (worker and maintenance, with a short retention) enqueued into at a
//! fixed rate for a long time. A line per interval (throughput, enqueue→start latency, RSS,
//! table sizes), then a summary that compares the first and the last window, so that growth
//! shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sked::store::bench::Bench;
use sked::worker::{HandlerResult, TaskContext, Worker};
use sked::{Engine, TaskState};

use crate::{CliError, CliResult};

use super::{noop, round};

/// What a soak runs.
pub(super) struct SoakPlan {
    /// Tasks enqueued a second.
    pub(super) rate: u32,
    pub(super) duration: Duration,
    /// Between two progress lines.
    pub(super) interval: Duration,
    /// The first and last windows compared in the summary.
    pub(super) window: Duration,
    /// The share of tasks that end dead, in percent.
    pub(super) dead_share: u32,
    /// The soak queue's own retention of succeeded and dead tasks, where it has one.
    pub(super) retention: [(TaskState, Option<jiff::SignedDuration>); 2],
}

impl SoakPlan {
    /// Tasks a second that end in `state`.
    fn rate_of(&self, state: TaskState) -> f64 {
        let dead = f64::from(self.rate) * f64::from(self.dead_share) / 100.0;
        match state {
            TaskState::Dead => dead,
            _ => f64::from(self.rate) - dead,
        }
    }
}

impl SoakPlan {
    /// The windows compared: five minutes, or a third of a shorter run.
    pub(super) fn window_for(duration: Duration) -> Duration {
        Duration::from_secs(300).min(duration / 3)
    }
}

/// Latencies of the tasks started since the last take, and of the first and last windows.
#[derive(Default)]
struct Samples {
    interval: Histogram,
    first: Histogram,
    last: Histogram,
}

/// How many buckets a [`Histogram`] has: 1 % wide from 1 µs, up to about 20 minutes.
const BUCKETS: usize = 2_100;

/// Latencies counted in buckets 1 % wide, so that percentiles come out within 1 % of the
/// samples' and the soak's own bookkeeping stays the same size however long it runs (kept as
/// samples, the two windows' latencies were megabytes that showed as the node's memory).
struct Histogram {
    counts: Vec<u64>,
    n: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            n: 0,
        }
    }
}

impl Histogram {
    fn record(&mut self, ms: f64) {
        let us = (ms * 1000.0).max(1.0);
        let bucket = (us.ln() / 1.01f64.ln()) as usize;
        self.counts[bucket.min(BUCKETS - 1)] += 1;
        self.n += 1;
    }

    /// The `p` quantile in ms, as the upper end of its bucket (0 for no samples).
    fn quantile(&self, p: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((self.n - 1) as f64 * p).round() as u64;
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen > rank {
                return 1.01f64.powi(bucket as i32 + 1) / 1000.0;
            }
        }
        1.01f64.powi(BUCKETS as i32) / 1000.0
    }
}

pub(super) async fn soak(
    engine: &Engine,
    sizes: &dyn Bench,
    plan: &SoakPlan,
) -> CliResult<serde_json::Value> {
    let started = Instant::now();
    let samples = Arc::new(Mutex::new(Samples::default()));
    let done = Arc::new(AtomicU64::new(0));
    let (s, d) = (samples.clone(), done.clone());
    let dead_share = u64::from(plan.dead_share);
    let (first_end, last_start) = (plan.window, plan.duration.saturating_sub(plan.window));
    let worker = Worker::new(sked::Client::embedded(engine.clone()))
        .id("soak-worker")
        .concurrency(64)
        .handle(
            "noop",
            move |ctx: TaskContext, payload: serde_json::Value| {
                let ms = jiff::Timestamp::now()
                    .duration_since(ctx.task().created_at)
                    .as_secs_f64()
                    * 1000.0;
                let at = started.elapsed();
                let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.interval.record(ms);
                if at < first_end {
                    s.first.record(ms);
                } else if at >= last_start {
                    s.last.record(ms);
                }
                d.fetch_add(1, Ordering::Relaxed);
                // Every hundred tasks, the first `dead_share` fail for good.
                let dies = payload["i"].as_u64().is_some_and(|i| i % 100 < dead_share);
                async move {
                    match dies {
                        true => HandlerResult::Err(sked::worker::TaskError::fatal(
                            "the soak's dead share",
                        )),
                        false => HandlerResult::Ok(()),
                    }
                }
            },
        );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async move {
        let _ = stop_rx.await;
    }));
    // The enqueuer keeps to the rate over the whole run, in small batches every 10 ms.
    let enqueued = Arc::new(AtomicU64::new(0));
    let enqueuer = {
        let (engine, enqueued) = (engine.clone(), enqueued.clone());
        let (rate, duration) = (plan.rate, plan.duration);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tick.tick().await;
                let at = started.elapsed().min(duration);
                let due = (at.as_secs_f64() * f64::from(rate)) as u64;
                let sent = enqueued.load(Ordering::Relaxed);
                if due > sent {
                    let tasks = (sent..due).map(|i| noop(i as usize)).collect();
                    engine.enqueue_many(tasks).await?;
                    enqueued.store(due, Ordering::Relaxed);
                }
                if at >= duration {
                    return Ok::<(), sked::Error>(());
                }
            }
        })
    };
    let mut lines = Vec::new();
    let mut rss_after_first = None;
    let (mut max_tasks, mut max_bytes, mut last_done) = (0u64, 0u64, 0u64);
    // The most tasks kept at once of each ended state, counted at each line.
    let mut kept_max = [0u64; 2];
    let mut next = plan.interval;
    while next <= plan.duration {
        tokio::time::sleep_until(tokio::time::Instant::from_std(started + next)).await;
        let ms = std::mem::take(&mut samples.lock().unwrap_or_else(|e| e.into_inner()).interval);
        let size = sizes.sizes().await.map_err(CliError::runtime)?;
        let now_done = done.load(Ordering::Relaxed);
        let rss = rss_mb();
        if rss_after_first.is_none() && next >= plan.window {
            rss_after_first = rss;
        }
        (max_tasks, max_bytes) = (max_tasks.max(size.tasks), max_bytes.max(size.bytes));
        let mut line = json!({
            "workload": "soak", "t_s": next.as_secs(),
            "per_s": round((now_done - last_done) as f64 / plan.interval.as_secs_f64()),
            "enqueued": enqueued.load(Ordering::Relaxed), "done": now_done,
            "tasks": size.tasks, "bytes": size.bytes, "rss_mb": rss.map(round),
        });
        if ms.n > 0 {
            let pct = percentiles(&ms);
            line["p50_ms"] = json!(pct.0);
            line["p99_ms"] = json!(pct.1);
        }
        let counts = ended_counts(engine).await?;
        for (i, (state, _)) in plan.retention.iter().enumerate() {
            line[state.as_str()] = json!(counts[i]);
            kept_max[i] = kept_max[i].max(counts[i]);
        }
        out!("{line}");
        lines.push(line);
        last_done = now_done;
        next += plan.interval;
    }
    enqueuer
        .await
        .map_err(CliError::runtime)?
        .map_err(CliError::runtime)?;
    // Every task enqueued must have run before the summary.
    let total = enqueued.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(Ordering::Relaxed) < total {
        if Instant::now() > deadline {
            return Err(CliError::runtime(format!(
                "{} of {total} tasks ran within a minute of the last enqueue",
                done.load(Ordering::Relaxed)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(());
    running
        .await
        .map_err(CliError::runtime)?
        .map_err(CliError::runtime)?;
    let s = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    let (first, last) = (percentiles(&s.first).1, percentiles(&s.last).1);
    let rss_last = rss_mb();
    Ok(json!({
        "workload": "soak", "summary": true, "rate": plan.rate,
        "secs": plan.duration.as_secs(), "window_s": plan.window.as_secs(),
        "enqueued": total, "done": done.load(Ordering::Relaxed),
        "p99_first_ms": first, "p99_last_ms": last,
        "p99_growth": round(last / first.max(1e-9) - 1.0),
        "rss_mb_after_first": rss_after_first.map(round), "rss_mb_last": rss_last.map(round),
        "tasks_max": max_tasks, "bytes_max": max_bytes,
        "kept": kept_summary(plan, kept_max),
    }))
}

/// The soak queue's succeeded and dead tasks kept now, each counted in full.
async fn ended_counts(engine: &Engine) -> CliResult<[u64; 2]> {
    let queues = engine.queues(10_000_000).await.map_err(CliError::runtime)?;
    let queue = super::noop(0).queue;
    let counts = queues.iter().find(|q| q.name == queue).map(|q| &q.counts);
    let n = |s: TaskState| counts.and_then(|c| c.get(&s)).copied().unwrap_or(0);
    Ok([n(TaskState::Succeeded), n(TaskState::Dead)])
}

/// For each ended state, the most tasks kept at once and how many seconds of that state's
/// tasks that was, beside the retention that bounds it.
fn kept_summary(plan: &SoakPlan, kept_max: [u64; 2]) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (i, (state, keep)) in plan.retention.iter().enumerate() {
        let per_s = plan.rate_of(*state);
        out.insert(
            state.as_str().into(),
            json!({
                "max": kept_max[i],
                "max_s": (per_s > 0.0).then(|| round(kept_max[i] as f64 / per_s)),
                "retention_s": keep.map(|k| k.as_secs()),
            }),
        );
    }
    serde_json::Value::Object(out)
}

/// p50 and p99 of `ms`, rounded (0 for none).
fn percentiles(ms: &Histogram) -> (f64, f64) {
    (round(ms.quantile(0.5)), round(ms.quantile(0.99)))
}

/// This process's resident memory in MiB (Linux), where the node runs.
pub(super) fn rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_answers_percentiles_within_one_percent() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.99), 0.0);
        // 1,000 samples: 0.5 ms, 1.5 ms, …, 999.5 ms, in no order.
        for i in (0..1000).rev() {
            h.record(f64::from(i) + 0.5);
        }
        for (p, exact) in [(0.5, 500.5), (0.99, 989.5), (0.0, 0.5), (1.0, 999.5)] {
            let got = h.quantile(p);
            assert!(
                got >= exact && got <= exact * 1.0101,
                "p{p}: {got} for {exact}"
            );
        }
        // Beyond the last bucket: counted there.
        h.record(1e9);
        assert!(h.quantile(1.0) > 600_000.0);
        assert_eq!(h.counts.len(), BUCKETS);
    }
}
