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

/// Until when a new task's dedup window holds its unique key (`None`: only while unfinished).
pub fn unique_until(task: &sked_core::NewTask, now: Timestamp) -> crate::Result<Option<Timestamp>> {
    task.unique_for
        .map(|window| {
            now.checked_add(window)
                .map_err(|e| crate::StoreError::Invalid(format!("unique_for: {e}")))
        })
        .transpose()
}

/// A task may be inserted already leased only when it is due at once and has no unique key
/// (a key may name another task, which a worker cannot be handed instead).
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
        Task {
            state: self.state,
            run_at: self.run_at,
            max_attempts: self.max_attempts,
            finished_at: self.state.is_finished().then_some(now),
            last_error: self.error.clone().or_else(|| task.last_error.clone()),
            result: self.result.clone(),
            lease_expires_at: None,
            ..task.clone()
        }
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

/// Ends the running attempt of `task` with `outcome` at `now`.
pub fn finish(task: &Task, outcome: &FinishOutcome, now: Timestamp, jitter: f64) -> Finish {
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
                let delay = retry_delay(task.backoff, task.attempt, jitter);
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
    if let Some(current) = current_attempt(task) {
        if !task.attempts.iter().any(|a| a.attempt == current.attempt) {
            task.attempts.push(current);
        }
    }
}

/// How a declared schedule compares with the stored one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    Create,
    Update,
    Unchanged,
}

/// Whether syncing `def` for `group` over `existing` creates, changes or keeps it. The paused
/// flag is not compared: an operator's pause survives a redeploy.
pub fn sync_action(
    existing: Option<&crate::Schedule>,
    def: &sked_core::ScheduleDef,
    group: &str,
) -> SyncAction {
    let Some(s) = existing else {
        return SyncAction::Create;
    };
    let same = s.spec == def.spec
        && s.tz == def.tz
        && s.task == def.task
        && s.overlap == def.overlap
        && s.catchup == def.catchup
        && s.catchup_window == def.catchup_window
        && s.declared_by.as_deref() == Some(group);
    if same {
        SyncAction::Unchanged
    } else {
        SyncAction::Update
    }
}

/// Records `name` in the report under `action`; whether the schedule must be written.
pub fn note_sync(report: &mut crate::ScheduleSyncReport, action: SyncAction, name: &str) -> bool {
    let list = match action {
        SyncAction::Unchanged => &mut report.unchanged,
        SyncAction::Create => &mut report.created,
        SyncAction::Update => &mut report.updated,
    };
    list.push(name.to_string());
    action != SyncAction::Unchanged
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

/// How a schedule is written over a stored one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// Made or replaced at run time (API, CLI): pausing or resuming fires from now.
    RunTime,
    /// Declared in code: the stored paused flag stays (an operator's pause survives a
    /// redeploy), so it does not decide the next fire time.
    Declared,
}

/// The next fire time and the anchor a schedule gets when written over `existing`: the stored
/// next fire time survives a write that does not change when the schedule fires (same spec and
/// zone, and for a run-time write the same paused flag), and intervals keep counting from the
/// old anchor while the spec is the same. `next_fire_at` and `now` are those of a new
/// schedule.
pub fn rewritten_times(
    existing: Option<&crate::Schedule>,
    def: &sked_core::ScheduleDef,
    how: Rewrite,
    next_fire_at: Option<Timestamp>,
    now: Timestamp,
) -> (Option<Timestamp>, Timestamp) {
    let Some(old) = existing else {
        return (next_fire_at, now);
    };
    let same_times = old.spec == def.spec
        && old.tz == def.tz
        && (how == Rewrite::Declared || old.paused == def.paused);
    let next = if same_times {
        old.next_fire_at
    } else {
        next_fire_at
    };
    let anchor = if old.spec == def.spec {
        old.anchor_at
    } else {
        now
    };
    (next, anchor)
}

/// Applying a plan is a compare-and-set: the schedule (`current`: its stored next fire time,
/// `None` when there is no such schedule) must still fire when the plan was made for.
pub fn check_plan_current(
    name: &str,
    current: Option<Option<Timestamp>>,
    expected: Option<Timestamp>,
) -> crate::Result<()> {
    match current {
        None => Err(crate::StoreError::schedule_not_found(name)),
        Some(c) if c != expected => Err(crate::StoreError::Conflict(format!(
            "schedule {name} was advanced by someone else"
        ))),
        Some(_) => Ok(()),
    }
}

/// Cancelling a task a plan replaces (overlap `replace`): one that finished meanwhile, or is
/// gone, has nothing left to replace.
pub fn replaced(cancelled: crate::Result<Task>) -> crate::Result<()> {
    match cancelled {
        Ok(_) | Err(crate::StoreError::Transition(_)) | Err(crate::StoreError::NotFound { .. }) => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The task a planned occurrence enqueues, if it enqueues one.
pub fn occurrence_task(
    p: &crate::ScheduleApplyParams,
    occ: &sked_core::PlannedOccurrence,
) -> Option<crate::TaskInsert> {
    (occ.outcome == sked_core::OccurrenceOutcome::Enqueued).then(|| crate::TaskInsert {
        task: p.task.to_new_task(),
        schedule: Some(p.name.clone()),
        nominal_at: Some(occ.nominal_at),
    })
}

/// A ledger line that could not be written because one is there: the occurrence was handled
/// already (the ledger's primary key makes a second task for it impossible).
pub fn occurrence_recorded(
    e: crate::StoreError,
    name: &str,
    nominal_at: Timestamp,
) -> crate::StoreError {
    match e {
        crate::StoreError::Conflict(_) => crate::StoreError::Conflict(format!(
            "occurrence {nominal_at} of schedule {name} was already recorded"
        )),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use sked_core::{ScheduleDef, TaskTemplate};

    use super::*;
    use crate::Schedule;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn stored(def: &ScheduleDef) -> Schedule {
        Schedule {
            name: def.name.clone(),
            spec: def.spec.clone(),
            tz: def.tz.clone(),
            task: def.task.clone(),
            overlap: def.overlap,
            catchup: def.catchup,
            catchup_window: def.catchup_window,
            paused: def.paused,
            anchor_at: t(0),
            next_fire_at: Some(t(100)),
            buffered_at: None,
            created_at: t(0),
            updated_at: t(0),
            last_started_at: None,
            last_finished_at: None,
            running: false,
            last_outcome: None,
            declared_by: None,
        }
    }

    #[test]
    fn a_rewrite_keeps_the_next_fire_unless_when_it_fires_changed() {
        let def = ScheduleDef::new("s", "every 90s", TaskTemplate::new("k"));
        let old = stored(&def);
        let (new_next, now) = (Some(t(500)), t(400));
        // New: fires from now.
        assert_eq!(
            rewritten_times(None, &def, Rewrite::RunTime, new_next, now),
            (new_next, now)
        );
        // Only the task changed: the stored next fire time and anchor stay.
        let task_only = ScheduleDef {
            task: TaskTemplate::new("other"),
            ..def.clone()
        };
        assert_eq!(
            rewritten_times(Some(&old), &task_only, Rewrite::RunTime, new_next, now),
            (Some(t(100)), t(0))
        );
        // A new zone: fires anew, intervals still count from the old anchor.
        let zone = def.clone().tz("Europe/Paris");
        assert_eq!(
            rewritten_times(Some(&old), &zone, Rewrite::RunTime, new_next, now),
            (new_next, t(0))
        );
        // A new spec: both anew.
        let spec = ScheduleDef {
            spec: "every 60s".into(),
            ..def.clone()
        };
        assert_eq!(
            rewritten_times(Some(&old), &spec, Rewrite::Declared, new_next, now),
            (new_next, now)
        );
        // Paused at run time changes when it fires; a declaration's paused flag does not.
        let paused = def.clone().paused();
        assert_eq!(
            rewritten_times(Some(&old), &paused, Rewrite::RunTime, None, now),
            (None, t(0))
        );
        assert_eq!(
            rewritten_times(Some(&old), &paused, Rewrite::Declared, new_next, now),
            (Some(t(100)), t(0))
        );
    }

    #[test]
    fn a_plan_applies_only_to_the_schedule_it_was_made_for() {
        assert!(check_plan_current("s", Some(Some(t(1))), Some(t(1))).is_ok());
        let moved = check_plan_current("s", Some(Some(t(2))), Some(t(1))).unwrap_err();
        assert_eq!(moved.kind(), crate::ErrorKind::Conflict);
        let gone = check_plan_current("s", None, Some(t(1))).unwrap_err();
        assert_eq!(gone.kind(), crate::ErrorKind::NotFound);
    }
}
