//! Latency: enqueue→start with an idle worker, and due-time→start of tasks due soon.

use std::time::{Duration, Instant};

use jiff::SignedDuration;
use sked::store::FinishOutcome;
use sked::{ClaimRequest, Engine};
use sked_core::NewTask;

use crate::{CliError, CliResult};

use super::{noop, succeeded, summary};

/// An idle worker long-polls; each sample enqueues one task and measures until it is claimed.
pub(super) async fn latency(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
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
pub(super) async fn lateness(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
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
            .task_finish_many_lean(finishes)
            .await
            .map_err(CliError::runtime)?
        {
            r.map_err(CliError::runtime)?;
        }
    }
    Ok(summary("lateness", samples))
}
