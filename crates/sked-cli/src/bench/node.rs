//! What a node costs: reading queue counts, and a whole node with nothing to do.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sked::store::bench::{Bench, Diagnostics};
use sked::{Engine, Node, Store};

use crate::{CliError, CliResult};

use super::{drain, round};

/// Queue counts over `n` finished tasks: the median of 5 reads at each counting limit, right
/// after the drain and, on PostgreSQL, again after a `VACUUM` (the drain leaves two dead index
/// entries per task until vacuum, which autovacuum runs soon after in normal operation).
pub(super) async fn counts(
    store: &Arc<dyn Store>,
    bench: &dyn Bench,
    engine: &Engine,
    n: usize,
) -> CliResult<serde_json::Value> {
    let spread = super::Spread { queues: 1, keys: 0 };
    drain(store, bench, n, 4, spread, 0, Duration::ZERO).await?;
    bench.settle().await.map_err(CliError::runtime)?;
    let mut line = json!({"workload": "counts"});
    line["after_drain"] = read_counts(engine, n).await?;
    if let Some(diag) = bench.diagnostics() {
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
pub(super) async fn idle(
    store: &Arc<dyn Store>,
    bench: &dyn Bench,
    secs: usize,
) -> CliResult<serde_json::Value> {
    let node = Node::builder()
        .store(store.clone())
        .worker(|w| {
            w.id("bench-idle")
                .executor(Arc::new(sked::executors::ShellExecutor))
        })
        .start()
        .await
        .map_err(CliError::runtime)?;
    let pg = bench.diagnostics();
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
