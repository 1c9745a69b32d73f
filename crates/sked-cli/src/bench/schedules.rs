//! `sked bench schedules`: `-n` schedules created in bulk, `--nodes` nodes planning them, each
//! with no-op workers that claim and finish every task, for `--duration`; then, for each
//! occurrence second in that time, how many tasks were made and missed, and how late they
//! were claimable and started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sked::store::{FinishOutcome, TaskListParams};
use sked::{ClaimRequest, Engine, MaintenanceConfig, Node, Store};
use sked_core::{OverlapPolicy, ScheduleDef, Spec, TaskTemplate};

use super::{percentiles, round};
use crate::{CliError, CliResult};

/// Schedules per bulk write while creating them.
const CREATE_BATCH: usize = 50_000;

/// What `sked bench schedules` runs.
pub(super) struct SchedulesPlan {
    pub(super) n: usize,
    pub(super) spec: String,
    pub(super) duration: Duration,
    /// Claiming loops per node.
    pub(super) workers: usize,
    pub(super) overlap: OverlapPolicy,
}

/// One node of the run: the node, and its workers' stop signal.
struct Running {
    node: Node,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

/// Runs the plan on `stores` (a node each); one JSON line per occurrence second, then the
/// summary.
pub(super) async fn schedules(
    stores: &[Arc<dyn Store>],
    plan: &SchedulesPlan,
) -> CliResult<Vec<serde_json::Value>> {
    let spec = Spec::parse(&plan.spec).map_err(|e| CliError::usage(format!("--spec: {e}")))?;
    // Created through a node of their own, without maintenance, as a client would.
    let maker = Node::builder()
        .store(stores[0].clone())
        .without_maintenance()
        .start()
        .await
        .map_err(CliError::runtime)?;
    let created = Instant::now();
    let bar = super::progress(plan.n, "create");
    for start in (0..plan.n).step_by(CREATE_BATCH) {
        let defs: Vec<ScheduleDef> = (start..plan.n.min(start + CREATE_BATCH))
            .map(|i| {
                ScheduleDef::new(
                    format!("bench-{i:07}"),
                    plan.spec.as_str(),
                    TaskTemplate::new("noop"),
                )
                .overlap(plan.overlap)
            })
            .collect();
        let len = defs.len() as u64;
        maker
            .engine()
            .schedule_put_many(defs)
            .await
            .map_err(CliError::runtime)?;
        bar.inc(len);
    }
    bar.finish_and_clear();
    let create_s = created.elapsed().as_secs_f64();
    maker.shutdown().await.map_err(CliError::runtime)?;
    let from = Timestamp::now();
    let cpu_from = cpu_seconds();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut running = Vec::new();
    for (k, store) in stores.iter().enumerate() {
        let node = Node::builder()
            .store(store.clone())
            .maintenance(MaintenanceConfig::default())
            .start()
            .await
            .map_err(CliError::runtime)?;
        let workers = (0..plan.workers)
            .map(|w| {
                let engine = node.engine().clone();
                tokio::spawn(work(engine, format!("bench-{k}-{w}"), stopped.clone()))
            })
            .collect();
        running.push(Running { node, workers });
    }
    tokio::time::sleep(plan.duration).await;
    let until = Timestamp::now();
    let rss_mb = super::soak::rss_mb();
    // The share of one core the nodes and their workers used while running.
    let core_share = match (cpu_from, cpu_seconds()) {
        (Some(a), Some(b)) => Some(round((b - a) / plan.duration.as_secs_f64())),
        _ => None,
    };
    let _ = stop.send(true);
    for r in running {
        for w in r.workers {
            let _ = w.await;
        }
        r.node.shutdown().await.map_err(CliError::runtime)?;
    }
    // The occurrences whose runs had a second to start before the end.
    let last = until
        .checked_sub(SignedDuration::from_secs(1))
        .unwrap_or(until);
    let mut seconds = Vec::new();
    let mut t = from;
    while let Some(next) = spec.next_after(t, &jiff::tz::TimeZone::UTC, from) {
        if next > last {
            break;
        }
        seconds.push(next);
        t = next;
    }
    let runs = made_runs(&stores[0], from, last).await?;
    let mut lines = Vec::new();
    let (mut all_ready, mut all_started, mut made, mut missed) = (vec![], vec![], 0, 0);
    for second in &seconds {
        let these: Vec<&Run> = runs.iter().filter(|r| r.nominal == *second).collect();
        let ready: Vec<f64> = these.iter().map(|r| r.ready_ms).collect();
        let started: Vec<f64> = these.iter().filter_map(|r| r.started_ms).collect();
        made += these.len();
        missed += plan.n.saturating_sub(these.len());
        let mut line = json!({
            "boundary": second.to_string(),
            "made": these.len(),
            "missed": plan.n.saturating_sub(these.len()),
            "started": started.len(),
        });
        stats(&mut line, "claimable", &ready);
        stats(&mut line, "started", &started);
        lines.push(line);
        all_ready.extend(ready);
        all_started.extend(started);
    }
    let mut summary = json!({
        "workload": "schedules",
        "spec": plan.spec,
        "nodes": stores.len(),
        "create_per_s": round(plan.n as f64 / create_s),
        "boundaries": seconds.len(),
        "made": made,
        "missed": missed,
        "rss_mb": rss_mb.map(round),
        "core_share": core_share,
    });
    stats(&mut summary, "claimable", &all_ready);
    stats(&mut summary, "started", &all_started);
    lines.push(summary);
    Ok(lines)
}

/// Claims and finishes tasks until `stop` turns true.
async fn work(engine: Engine, worker: String, stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow() {
        let claimed = engine
            .claim(ClaimRequest {
                worker: worker.clone(),
                max: super::CLAIM_BATCH as u32,
                wait: Some(Duration::from_secs(1)),
                stop: Some(stop.clone()),
                ..ClaimRequest::default()
            })
            .await;
        let tasks = match claimed {
            Ok(tasks) => tasks,
            Err(e) => {
                tracing::warn!(error = %e, "bench claim failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if tasks.is_empty() {
            continue;
        }
        let items = tasks
            .iter()
            .map(|t| (t.id, t.attempt, FinishOutcome::Succeeded { result: None }))
            .collect();
        if let Err(e) = engine.finish_many(items).await {
            tracing::warn!(error = %e, "bench finish failed");
        }
    }
}

/// A run of an occurrence: its nominal time, and how late (ms) it was claimable (made, or due
/// if made ahead) and started.
struct Run {
    nominal: Timestamp,
    ready_ms: f64,
    started_ms: Option<f64>,
}

/// The runs of every occurrence from `from` to `last`, read a page at a time.
async fn made_runs(
    store: &Arc<dyn Store>,
    from: Timestamp,
    last: Timestamp,
) -> CliResult<Vec<Run>> {
    let ms = |a: Timestamp, b: Timestamp| a.duration_since(b).as_secs_f64() * 1000.0;
    let mut runs = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .task_list(TaskListParams {
                before_id: before,
                limit: 10_000,
                ..TaskListParams::default()
            })
            .await
            .map_err(CliError::runtime)?;
        for t in &page.items {
            let Some(nominal) = t.nominal_at.filter(|n| *n > from && *n <= last) else {
                continue;
            };
            runs.push(Run {
                nominal,
                ready_ms: ms(t.created_at.max(t.run_at), nominal),
                started_ms: t.started_at.map(|s| ms(s, nominal)),
            });
        }
        match (page.more, page.items.last()) {
            (true, Some(t)) => before = Some(t.id),
            _ => return Ok(runs),
        }
    }
}

/// The CPU time this process has used, in seconds (Linux; user and system, in clock ticks of
/// 1/100 s as `/proc` reports them).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (f64, f64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    Some((utime + stime) / 100.0)
}

/// Adds `<name>_p50_ms`, `_p99_ms` and `_max_ms` of `ms` to `line` (none when empty).
fn stats(line: &mut serde_json::Value, name: &str, ms: &[f64]) {
    if ms.is_empty() {
        return;
    }
    let pct = percentiles(ms.to_vec());
    line[format!("{name}_p50_ms")] = json!(round(pct(0.5)));
    line[format!("{name}_p99_ms")] = json!(round(pct(0.99)));
    line[format!("{name}_max_ms")] = json!(round(pct(1.0)));
}
