//! The state rules every backend applies the same way: what a finished attempt, a rescue or a
//! new run time does to a task. Backends only store the result.

use jiff::{SignedDuration, Timestamp};
use sked_core::{Attempt, Task, TaskId, TaskState, state_after_failure};

use crate::{FinishOutcome, retry_delay};

/// A new or moved task waits in `scheduled` until its run time, else it is `available`.
pub fn state_for_run_at(run_at: Timestamp, now: Timestamp) -> TaskState {
    if run_at <= now {
        TaskState::Available
    } else {
        TaskState::Scheduled
    }
}

/// The state of a task in `state` moved to `run_at`: a task waiting for its parents keeps
/// waiting (only its run time moves); any other waits for `run_at` or is due.
pub fn state_after_reschedule(state: TaskState, run_at: Timestamp, now: Timestamp) -> TaskState {
    match state {
        TaskState::Waiting => TaskState::Waiting,
        _ => state_for_run_at(run_at, now),
    }
}

/// Checks that `task` may be moved to `run_at`: a task that has not started must still be
/// able to start by its deadline.
pub fn check_reschedule(task: &Task, run_at: Timestamp) -> crate::Result<()> {
    sked_core::Transition::Reschedule.check(task.state)?;
    match task.expires_at {
        Some(deadline) if task.attempt == 0 && run_at >= deadline => {
            Err(crate::StoreError::Invalid(format!(
                "task {} must start by its deadline {deadline}: a run time of {run_at} would never run",
                task.id
            )))
        }
        _ => Ok(()),
    }
}

/// Until when a new task's dedup window holds its unique key (`None`: only while unfinished).
pub fn unique_until(task: &sked_core::NewTask, now: Timestamp) -> crate::Result<Option<Timestamp>> {
    task.unique_for
        .map(|window| {
            now.checked_add(window)
                .map_err(|e| crate::StoreError::Invalid(format!("unique_for: {e}")))
        })
        .transpose()
}

/// A new task's deadline to start ([`sked_core::NewTask::deadline`]). A schedule's run may be
/// made after its deadline (an occurrence caught up late): it is inserted, and expires.
pub fn expires_at(t: &crate::TaskInsert, now: Timestamp) -> crate::Result<Option<Timestamp>> {
    match (&t.schedule, t.task.expires_at) {
        (Some(_), Some(at)) => Ok(Some(at)),
        _ => t
            .task
            .deadline(now)
            .map_err(|e| crate::StoreError::Invalid(e.message().to_string())),
    }
}

/// A task may be inserted already leased only when it is due at once and has no unique key
/// (a key may name another task, which a worker cannot be handed instead) and no parents.
pub fn check_insert_claimed(p: &crate::TaskInsertClaimedParams) -> crate::Result<()> {
    let task = &p.task.task;
    if task.unique_key.is_some() {
        return Err(crate::StoreError::Invalid(
            "a task with a unique key cannot be inserted leased".into(),
        ));
    }
    if task.run_at.is_some_and(|at| at > p.now) {
        return Err(crate::StoreError::Invalid(
            "a task due later cannot be inserted leased".into(),
        ));
    }
    if !task.depends_on.is_empty() {
        return Err(crate::StoreError::Invalid(
            "a task with parents cannot be inserted leased".into(),
        ));
    }
    if task.batch.is_some() {
        return Err(crate::StoreError::Invalid(
            "a task that joins a batch cannot be inserted leased".into(),
        ));
    }
    Ok(())
}

/// What ending an attempt changes on the task row.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    pub state: TaskState,
    pub run_at: Timestamp,
    pub max_attempts: i32,
    /// The attempt's error, kept as the task's `last_error`.
    pub error: Option<String>,
    pub result: Option<serde_json::Value>,
    /// How the attempt ended, for its line in the attempt history.
    pub outcome: &'static str,
}

impl Finish {
    /// The task row after the change.
    pub fn apply(&self, task: &Task, now: Timestamp) -> Task {
        self.applied(task.clone(), now)
    }

    /// [`Finish::apply`], to a task the caller gives up.
    pub fn applied(&self, task: Task, now: Timestamp) -> Task {
        Task {
            state: self.state,
            run_at: self.run_at,
            max_attempts: self.max_attempts,
            finished_at: self.state.is_finished().then_some(now),
            last_error: self.error.clone().or(task.last_error),
            result: self.result.clone(),
            lease_expires_at: None,
            ..task
        }
    }
}

/// Whether a task in `state` may be deleted: only once it has ended, so that nothing deleted
/// runs or is waited for by a worker.
pub fn check_delete(id: TaskId, state: TaskState) -> crate::Result<()> {
    match state.is_finished() {
        true => Ok(()),
        false => Err(crate::StoreError::Conflict(format!(
            "task {id} is {}: only a task that has ended can be deleted (cancel it first)",
            state.as_str()
        ))),
    }
}

/// The task an attempt ending names, if that attempt still holds it: a missing task is not
/// found, one no longer running as that attempt is a stale lease.
pub fn held(current: Option<&Task>, id: TaskId, attempt: i32) -> crate::Result<&Task> {
    match current {
        None => Err(crate::StoreError::task_not_found(id)),
        Some(t) if t.state != TaskState::Running || t.attempt != attempt => {
            Err(crate::StoreError::StaleLease { id, attempt })
        }
        Some(t) => Ok(t),
    }
}

/// How long after its timeout a running attempt keeps its lease at most, unless the engine is
/// told otherwise: time for a worker to stop the work and report how it ended.
pub const DEFAULT_TIMEOUT_GRACE: SignedDuration = SignedDuration::from_secs(30);

/// The end of a lease asked to last until `wanted`, for an attempt started at `started_at`:
/// never later than the task's timeout and `grace` (held between zero and
/// [`sked_core::MAX_DURATION`]) after that start. A worker that ignores the
/// timeout but keeps heartbeating so loses the task, which the rescuer then runs again.
pub fn lease_end(
    started_at: Timestamp,
    timeout: Option<SignedDuration>,
    grace: SignedDuration,
    wanted: Timestamp,
) -> Timestamp {
    let grace = grace.clamp(SignedDuration::ZERO, sked_core::MAX_DURATION);
    let deadline = timeout
        .and_then(|t| started_at.checked_add(t).ok())
        .and_then(|at| at.checked_add(grace).ok());
    match deadline {
        Some(deadline) => wanted.min(deadline),
        None => wanted,
    }
}

/// Until when a heartbeat at `now` extends the lease of `attempt`, asked for `ttl`: an error
/// when the attempt no longer holds the task, or has run past its timeout and `grace`.
pub fn heartbeat(
    current: Option<&Task>,
    id: TaskId,
    attempt: i32,
    now: Timestamp,
    ttl: SignedDuration,
    grace: SignedDuration,
) -> crate::Result<Timestamp> {
    let task = held(current, id, attempt)?;
    let wanted = now
        .checked_add(ttl)
        .map_err(|e| crate::StoreError::Invalid(e.to_string()))?;
    let started_at = task.started_at.unwrap_or(now);
    let end = lease_end(started_at, task.timeout, grace, wanted);
    match task.timeout {
        Some(timeout) if end <= now => Err(crate::StoreError::TimedOut {
            id,
            attempt,
            timeout,
        }),
        _ => Ok(end),
    }
}

/// The queues whose default backoff the endings need: those of the tasks without a backoff
/// of their own whose attempt failed. Each once; none for successes (they read nothing more).
pub fn queues_for_backoff<'a>(
    endings: impl IntoIterator<Item = (&'a Task, &'a FinishOutcome)>,
) -> Vec<String> {
    let mut queues: Vec<String> = (endings.into_iter())
        .filter(|(t, o)| t.backoff.is_none() && matches!(o, FinishOutcome::Failed { .. }))
        .map(|(t, _)| t.queue.clone())
        .collect();
    queues.sort_unstable();
    queues.dedup();
    queues
}

/// A queue's `backoff` column read back: its spec, or none.
pub fn queue_backoff_of_column(v: Option<&str>) -> crate::Result<Option<sked_core::Backoff>> {
    v.map(|spec| {
        spec.parse()
            .map_err(|e| crate::StoreError::Backend(format!("bad queue backoff {spec:?}: {e}")))
    })
    .transpose()
}

/// Ends the running attempt of `task` with `outcome` at `now`. A failed attempt that retries
/// waits as the task's backoff says, else as its queue's (`queue_backoff`), else the default.
pub fn finish(
    task: &Task,
    outcome: &FinishOutcome,
    now: Timestamp,
    jitter: f64,
    queue_backoff: Option<&sked_core::Backoff>,
) -> Finish {
    match outcome {
        FinishOutcome::Succeeded { result } => Finish {
            state: TaskState::Succeeded,
            run_at: task.run_at,
            max_attempts: task.max_attempts,
            error: None,
            result: result.clone(),
            outcome: "succeeded",
        },
        FinishOutcome::Failed { error, retryable } => {
            let state = if task.cancel_requested {
                TaskState::Cancelled
            } else {
                state_after_failure(task.attempt, task.max_attempts, *retryable)
            };
            let run_at = if state == TaskState::Retrying {
                let backoff = task.backoff.as_ref().or(queue_backoff);
                let delay = retry_delay(backoff, task.attempt, jitter);
                now.checked_add(delay).unwrap_or(now)
            } else {
                task.run_at
            };
            Finish {
                state,
                run_at,
                max_attempts: task.max_attempts,
                error: Some(error.clone()),
                result: None,
                outcome: "failed",
            }
        }
        // The attempt number stays a growing fencing token; the snooze gives one back.
        FinishOutcome::Snoozed { until } => Finish {
            state: state_for_run_at(*until, now),
            run_at: *until,
            max_attempts: task.max_attempts.saturating_add(1),
            error: None,
            result: None,
            outcome: "snoozed",
        },
        // Given back: claimable again now, in its old place, the attempt given back like a snooze.
        FinishOutcome::Released => Finish {
            state: TaskState::Available,
            run_at: task.run_at,
            max_attempts: task.max_attempts.saturating_add(1),
            error: None,
            result: None,
            outcome: "released",
        },
        FinishOutcome::Cancelled => Finish {
            state: TaskState::Cancelled,
            run_at: task.run_at,
            max_attempts: task.max_attempts,
            error: None,
            result: None,
            outcome: "cancelled",
        },
    }
}

/// Where a running task whose lease expired goes, and the error recorded for the attempt.
pub fn rescue(task: &Task) -> (TaskState, String) {
    let state = if task.cancel_requested {
        TaskState::Cancelled
    } else if task.attempt >= task.max_attempts {
        TaskState::Dead
    } else {
        TaskState::Available
    };
    let worker = task.worker.as_deref().unwrap_or("?");
    let past_timeout = match (task.timeout, task.started_at, task.lease_expires_at) {
        (Some(timeout), Some(started_at), Some(expired)) => started_at
            .checked_add(timeout)
            .is_ok_and(|at| expired >= at),
        _ => false,
    };
    let error = match (past_timeout, task.timeout) {
        (true, Some(timeout)) => format!(
            "timed out: worker {worker} held the task past its timeout of {} without reporting",
            sked_core::format_duration(timeout)
        ),
        _ => format!("lease expired: worker {worker} stopped heartbeating"),
    };
    (state, error)
}

/// The attempt the task row itself describes: the running one, or the one that finished it.
pub fn current_attempt(task: &Task) -> Option<Attempt> {
    let outcome = match task.state {
        TaskState::Running => "running",
        TaskState::Succeeded => "succeeded",
        TaskState::Dead => "failed",
        TaskState::Cancelled => "cancelled",
        _ => return None,
    };
    let (worker, started_at) = (task.worker.clone()?, task.started_at?);
    Some(Attempt {
        attempt: task.attempt,
        worker,
        started_at,
        finished_at: task.finished_at,
        outcome: outcome.into(),
        error: if task.state == TaskState::Dead {
            task.last_error.clone()
        } else {
            None
        },
    })
}

/// Completes a task's history: the stored attempts plus the one on the task row.
pub fn add_current_attempt(task: &mut Task) {
    if let Some(current) = current_attempt(task)
        && !task.attempts.iter().any(|a| a.attempt == current.attempt)
    {
        task.attempts.push(current);
    }
}

/// How many items a list returns when the caller does not say.
pub const LIST_LIMIT_DEFAULT: u32 = 100;
/// The most items one list request returns (a page; ask again with `before`).
pub const LIST_LIMIT_MAX: u32 = 1000;
/// The most rows a backend returns from one list statement, whatever it is asked.
pub const STORE_LIST_LIMIT_MAX: u32 = 10_000;

/// A list's page size: the default when none is asked for, else between 1 and
/// [`LIST_LIMIT_MAX`].
pub fn list_limit(asked: Option<u32>) -> u32 {
    asked.unwrap_or(LIST_LIMIT_DEFAULT).clamp(1, LIST_LIMIT_MAX)
}

pub mod batches;
mod calendars;
pub mod dependents;
mod materialise;
mod schedules;
pub mod workflows;
pub use calendars::*;
pub use materialise::*;
pub use schedules::*;
