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

/// `-n` tasks, one at a time: a caller waits for the task over HTTP (`GET /v1/tasks/{id}?wait=`
/// on a server in this process), a claim takes it and this node ends it; each sample is the
/// time from the ending's call to the wait's answer, which includes the ending's own commit.
pub(super) async fn wait(engine: &Engine, n: usize) -> CliResult<serde_json::Value> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(CliError::runtime)?;
    let url = format!(
        "http://{}",
        listener.local_addr().map_err(CliError::runtime)?
    );
    let server = tokio::spawn(sked_server::serve(
        listener,
        sked_server::AppState::new(engine.clone()),
        std::future::pending(),
    ));
    let client = sked::Client::remote(&url).map_err(CliError::runtime)?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let id = engine.enqueue(noop(i)).await.map_err(CliError::runtime)?.id;
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move {
                let task = client.task_wait(id, Duration::from_secs(10)).await;
                (task, Instant::now())
            })
        };
        // The wait has read the task and parked before the task ends.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let req = ClaimRequest {
            worker: "bench".into(),
            max: 1,
            ..Default::default()
        };
        let claimed = engine.claim(req).await.map_err(CliError::runtime)?;
        let [t] = claimed.as_slice() else {
            return Err(CliError::runtime(format!(
                "claimed {} tasks",
                claimed.len()
            )));
        };
        let ending = Instant::now();
        engine
            .finish(t.id, t.attempt, FinishOutcome::Succeeded { result: None })
            .await
            .map_err(CliError::runtime)?;
        let (task, answered) = waiter.await.map_err(CliError::runtime)?;
        let task = task.map_err(CliError::runtime)?;
        if !task.state.is_finished() {
            return Err(CliError::runtime(format!(
                "the wait answered task {id} still {}",
                task.state
            )));
        }
        samples.push(answered.duration_since(ending).as_secs_f64() * 1000.0);
    }
    server.abort();
    Ok(summary("wait", samples))
}

/// Parks `n` waits, each on a task due in a day, for as long as the guard lives: what waiting
/// callers cost the work that runs meanwhile.
pub(super) async fn park_waiters(engine: &Engine, n: usize) -> CliResult<ParkedWaiters> {
    let later = jiff::Timestamp::now()
        .checked_add(SignedDuration::from_hours(24))
        .map_err(CliError::runtime)?;
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| {
            let mut t = NewTask::new("parked").run_at(later);
            t.payload = serde_json::json!({ "i": i });
            t
        })
        .collect();
    let ids = engine
        .enqueue_many(tasks)
        .await
        .map_err(CliError::runtime)?;
    let handles = (ids.into_iter())
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let _ = engine.task_wait(t.id, Duration::from_secs(3600)).await;
            })
        })
        .collect();
    Ok(ParkedWaiters(handles))
}

/// Waits parked by [`park_waiters`]; dropped, they stop.
pub(super) struct ParkedWaiters(Vec<tokio::task::JoinHandle<()>>);

impl Drop for ParkedWaiters {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}
