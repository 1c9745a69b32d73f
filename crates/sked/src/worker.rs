//! A worker pool on an [`Engine`]: claims tasks of the kinds it has executors for, runs each
//! with heartbeats, its timeout and cancellation, and reports how it ended.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use sked_core::Task;
use sked_store::{ErrorKind, FinishOutcome};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::executors::{ExecResult, Executor};
use crate::{ClaimRequest, Engine};

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub id: String,
    /// Queues to work; all when empty.
    pub queues: Vec<String>,
    /// Tasks run at once.
    pub concurrency: usize,
    /// How long in-flight tasks may take to finish after shutdown is asked.
    pub shutdown_grace: Duration,
}

impl WorkerConfig {
    pub fn new(id: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            id: id.into(),
            queues: Vec::new(),
            concurrency: 10,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

pub struct Worker {
    engine: Engine,
    executors: HashMap<String, Arc<dyn Executor>>,
    config: WorkerConfig,
}

impl Worker {
    pub fn new(engine: Engine, config: WorkerConfig) -> Worker {
        Worker {
            engine,
            executors: HashMap::new(),
            config,
        }
    }

    pub fn executor(mut self, exec: Arc<dyn Executor>) -> Worker {
        self.executors.insert(exec.kind().to_string(), exec);
        self
    }

    /// Claims and runs tasks until `shutdown` turns true, then lets in-flight tasks finish
    /// within the grace period.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let kinds: Vec<String> = self.executors.keys().cloned().collect();
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut running = JoinSet::new();
        let executors = Arc::new(self.executors);
        tracing::info!(worker = %self.config.id, ?kinds, "worker started");
        loop {
            if *shutdown.borrow() {
                break;
            }
            // Wait for at least one free slot, then claim as many tasks as slots are free.
            let first = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("semaphore is never closed"),
                _ = shutdown.changed() => continue,
            };
            let free = 1 + slots.available_permits();
            let req = ClaimRequest {
                worker: self.config.id.clone(),
                queues: self.config.queues.clone(),
                kinds: kinds.clone(),
                max: free as u32,
                // Long: the claim wakes on new work by itself; this only bounds one call.
                wait: Some(Duration::from_secs(30)),
                lease_ttl: None,
            };
            let claimed = tokio::select! {
                r = self.engine.claim(req) => r,
                _ = shutdown.changed() => continue,
            };
            let tasks = match claimed {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed; retrying in 1s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut permits = vec![first];
            for task in tasks {
                let permit = match permits.pop() {
                    Some(p) => p,
                    None => slots
                        .clone()
                        .try_acquire_owned()
                        .expect("claimed no more than free slots"),
                };
                let Some(exec) = executors.get(&task.kind).cloned() else {
                    continue;
                };
                let engine = self.engine.clone();
                running.spawn(async move {
                    execute(&engine, exec.as_ref(), task).await;
                    drop(permit);
                });
            }
            // Reap finished runs without waiting.
            while running.try_join_next().is_some() {}
        }
        while running.try_join_next().is_some() {}
        tracing::info!(worker = %self.config.id, in_flight = running.len(), "worker stopping");
        let drain = async { while running.join_next().await.is_some() {} };
        if tokio::time::timeout(self.config.shutdown_grace, drain)
            .await
            .is_err()
        {
            tracing::warn!(
                "grace period over: abandoning in-flight tasks (their leases will expire)"
            );
            running.abort_all();
        }
    }
}

/// Runs one claimed task to its end and reports it.
pub async fn execute(engine: &Engine, exec: &dyn Executor, task: Task) {
    let (id, attempt) = (task.id, task.attempt);
    let ttl = engine.config().lease_ttl;
    let beat = Duration::try_from(ttl / 3)
        .unwrap_or(Duration::from_secs(1))
        .max(Duration::from_millis(50));
    let deadline = task
        .timeout
        .map(|t| tokio::time::Instant::now() + Duration::try_from(t).unwrap_or_default());
    // Boxed (and so `Unpin`) by `async_trait`: it can be polled by reference and dropped early.
    let mut work = exec.run(&task);
    let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + beat, beat);
    let outcome = loop {
        tokio::select! {
            result = &mut work => break to_outcome(result, engine),
            _ = sleep_until_opt(deadline) => {
                let t = task.timeout.map(sked_core::format_duration).unwrap_or_default();
                break FinishOutcome::Failed { error: format!("timed out after {t}"), retryable: true };
            }
            _ = heartbeat.tick() => match engine.heartbeat(id, attempt, None).await {
                Ok(reply) if reply.cancel_requested => break FinishOutcome::Cancelled,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Conflict || e.kind() == ErrorKind::NotFound => {
                    // The lease is gone (rescued, maybe running elsewhere): stop, report nothing.
                    tracing::warn!(task = id, attempt, error = %e, "lost the lease; abandoning the task");
                    return;
                }
                Err(e) => tracing::warn!(task = id, error = %e, "heartbeat failed"),
            },
        }
    };
    // Dropping `work` here stops the executor if it was still running.
    drop(work);
    // While the store is unreachable, keep trying for as long as the lease would last: after
    // that the task is rescued and runs again anyway (at least once).
    let give_up = tokio::time::Instant::now() + Duration::try_from(ttl).unwrap_or_default();
    let mut pause = Duration::from_millis(100);
    loop {
        match engine.finish(id, attempt, outcome.clone()).await {
            Ok(_) => return,
            Err(e)
                if e.kind() == ErrorKind::Unavailable
                    && tokio::time::Instant::now() + pause < give_up =>
            {
                tracing::warn!(task = id, attempt, error = %e, "cannot record the end of the task yet; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                tracing::warn!(task = id, attempt, error = %e, "could not record the end of the task");
                return;
            }
        }
    }
}

fn to_outcome(result: ExecResult, engine: &Engine) -> FinishOutcome {
    match result {
        ExecResult::Success(result) => FinishOutcome::Succeeded { result },
        ExecResult::Failure { error, retryable } => FinishOutcome::Failed { error, retryable },
        ExecResult::Snooze(d) => FinishOutcome::Snoozed {
            until: engine
                .now()
                .checked_add(d.max(SignedDuration::ZERO))
                .unwrap_or(engine.now()),
        },
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
