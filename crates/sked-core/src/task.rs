//! Tasks: their states, the named transitions between them, and what a new task looks like.
//!
//! ```text
//!  enqueue ─► scheduled ──stage──► available ──claim──► running ──complete──► succeeded
//!               ▲   ▲                 ▲                  │ │ │
//!               │   └──── snooze ─────┼──────────────────┘ │ └─fail (retryable)─► retrying ─stage─► available
//!   reschedule ─┘                     └──── rescue ────────┘   fail (fatal / out of attempts) ─► dead
//!  cancel: scheduled/available/retrying ─► cancelled; running ─► running + cancel requested ─► cancelled
//!  retry (manual): succeeded/dead/cancelled ─► available
//! ```

use std::fmt;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// Task ids are time-ordered integers (assigned by the store in insertion order).
pub type TaskId = i64;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for its run_at (set by enqueue, reschedule and snooze).
    Scheduled,
    /// Due and waiting for a worker (set by enqueue, staging, rescue and manual retry).
    Available,
    /// Claimed by a worker holding a lease (set by claim only).
    Running,
    /// Failed and waiting for its backoff to pass (set by a retryable fail).
    Retrying,
    /// Finished well (set by complete).
    Succeeded,
    /// Failed for good: a fatal error, or out of attempts (set by fail and rescue).
    Dead,
    /// Cancelled before or while it ran (set by cancel, or by a worker acknowledging it).
    Cancelled,
}

impl TaskState {
    pub const ALL: [TaskState; 7] = [
        TaskState::Scheduled,
        TaskState::Available,
        TaskState::Running,
        TaskState::Retrying,
        TaskState::Succeeded,
        TaskState::Dead,
        TaskState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Scheduled => "scheduled",
            TaskState::Available => "available",
            TaskState::Running => "running",
            TaskState::Retrying => "retrying",
            TaskState::Succeeded => "succeeded",
            TaskState::Dead => "dead",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Result<TaskState, SpecError> {
        TaskState::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            SpecError::new(format!(
                "unknown task state {s:?}: expected one of scheduled, available, running, retrying, succeeded, dead, cancelled"
            ))
        })
    }

    /// Waiting states (scheduled, retrying) become available when their run time comes.
    pub fn is_waiting(self) -> bool {
        matches!(self, TaskState::Scheduled | TaskState::Retrying)
    }

    /// Finished states never change again except by a manual retry.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Dead | TaskState::Cancelled
        )
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every state change is one of these, applied by the store as a compare-and-set on
/// [`Transition::from_states`] (and, for a running task, on its attempt number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// A due scheduled/retrying task becomes available.
    Stage,
    /// A worker takes an available task; the attempt number grows by one and fences the lease.
    Claim,
    /// The lease holder reports success.
    Complete,
    /// The lease holder reports a failure (retrying or dead).
    Fail,
    /// The lease holder asks to run again later without spending an attempt.
    Snooze,
    /// A task that has not started is cancelled.
    Cancel,
    /// A running task is asked to stop; it stays running until its worker acknowledges.
    RequestCancel,
    /// An expired lease: the task is re-queued or dead.
    Rescue,
    /// A finished task is run again by hand.
    Retry,
    /// A task that has not started gets a new run_at.
    Reschedule,
}

impl Transition {
    /// The states a task must be in for this transition to apply.
    pub fn from_states(self) -> &'static [TaskState] {
        use TaskState::*;
        match self {
            Transition::Stage => &[Scheduled, Retrying],
            Transition::Claim => &[Available],
            Transition::Complete
            | Transition::Fail
            | Transition::Snooze
            | Transition::RequestCancel
            | Transition::Rescue => &[Running],
            Transition::Cancel | Transition::Reschedule => &[Scheduled, Available, Retrying],
            Transition::Retry => &[Succeeded, Dead, Cancelled],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transition::Stage => "stage",
            Transition::Claim => "claim",
            Transition::Complete => "complete",
            Transition::Fail => "fail",
            Transition::Snooze => "snooze",
            Transition::Cancel => "cancel",
            Transition::RequestCancel => "request_cancel",
            Transition::Rescue => "rescue",
            Transition::Retry => "retry",
            Transition::Reschedule => "reschedule",
        }
    }

    /// Checks that a task in `state` may take this transition.
    pub fn check(self, state: TaskState) -> Result<(), TransitionError> {
        if self.from_states().contains(&state) {
            Ok(())
        } else {
            Err(TransitionError {
                transition: self,
                state,
            })
        }
    }
}

/// A transition asked of a task in a state that does not allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionError {
    pub transition: Transition,
    pub state: TaskState,
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let allowed: Vec<&str> = self
            .transition
            .from_states()
            .iter()
            .map(|s| s.as_str())
            .collect();
        write!(
            f,
            "cannot {} a task that is {} (only a task that is {})",
            self.transition.name().replace('_', " "),
            self.state,
            allowed.join(" or ")
        )
    }
}

impl std::error::Error for TransitionError {}

/// The state a failed attempt leads to.
pub fn state_after_failure(attempt: i32, max_attempts: i32, retryable: bool) -> TaskState {
    if retryable && attempt < max_attempts {
        TaskState::Retrying
    } else {
        TaskState::Dead
    }
}

/// Limits that apply to new tasks.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;
pub const DEFAULT_QUEUE: &str = "default";

/// A task to enqueue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    pub kind: String,
    #[serde(default = "default_queue")]
    pub queue: String,
    #[serde(default)]
    pub payload: serde_json::Value,
    #[serde(default)]
    pub priority: i32,
    /// When to run; `None` means now.
    #[serde(default)]
    pub run_at: Option<Timestamp>,
    #[serde(default = "default_max_attempts")]
    pub max_attempts: i32,
    /// Execution deadline of one attempt.
    #[serde(default, with = "crate::serde_duration::option")]
    pub timeout: Option<SignedDuration>,
    #[serde(default)]
    pub unique_key: Option<String>,
    /// With `unique_key`: the key stays held this long after this task's enqueue, finished
    /// or not (a dedup window; without it the key is held while the task is unfinished).
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub unique_for: Option<SignedDuration>,
    /// With `unique_key`: the task runs once the key has been quiet this long. It is due
    /// `debounce` after its enqueue; an enqueue that finds the key held by a task that has
    /// not started replaces that task's payload and moves it to `debounce` from then.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub debounce: Option<SignedDuration>,
    /// Overrides the default retry backoff for this task.
    #[serde(default)]
    pub backoff: Option<Backoff>,
    /// A concurrency key (a tenant, say): a queue's per-key limit caps the running tasks of
    /// each key, and claims take keys in turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The longest unique or concurrency key, in characters.
pub const MAX_KEY_CHARS: usize = 512;

/// A task's own retry backoff: `base` doubling up to `max` (with the usual jitter).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    #[serde(with = "crate::serde_duration")]
    pub base: SignedDuration,
    #[serde(with = "crate::serde_duration")]
    pub max: SignedDuration,
}

pub(crate) fn default_queue() -> String {
    DEFAULT_QUEUE.to_string()
}

pub(crate) fn default_max_attempts() -> i32 {
    DEFAULT_MAX_ATTEMPTS
}

impl NewTask {
    /// A task of this kind: queue `default`, no payload, priority 0, due now, 25 attempts.
    /// The methods below set the rest:
    /// `NewTask::new("email").payload(json!({"to": "a@b.c"})).queue("mail").priority(5)`.
    pub fn new(kind: impl Into<String>) -> NewTask {
        NewTask {
            kind: kind.into(),
            queue: default_queue(),
            payload: serde_json::Value::Null,
            priority: 0,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: None,
            unique_key: None,
            unique_for: None,
            debounce: None,
            backoff: None,
            key: None,
        }
    }

    /// With this concurrency key: a queue's per-key limit caps the running tasks of each key,
    /// and claims take keys in turn.
    pub fn key(mut self, key: impl Into<String>) -> NewTask {
        self.key = Some(key.into());
        self
    }

    /// In this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> NewTask {
        self.queue = queue.into();
        self
    }

    /// With this JSON payload (at most 1 MiB serialized).
    pub fn payload(mut self, payload: serde_json::Value) -> NewTask {
        self.payload = payload;
        self
    }

    /// With this priority: higher runs first.
    pub fn priority(mut self, priority: i32) -> NewTask {
        self.priority = priority;
        self
    }

    /// Due at this time instead of now.
    pub fn run_at(mut self, at: Timestamp) -> NewTask {
        self.run_at = Some(at);
        self
    }

    /// At most this many attempts before it is dead.
    pub fn max_attempts(mut self, n: i32) -> NewTask {
        self.max_attempts = n;
        self
    }

    /// Each attempt is stopped after this long.
    pub fn timeout(mut self, timeout: SignedDuration) -> NewTask {
        self.timeout = Some(timeout);
        self
    }

    /// While an unfinished task holds this key, enqueuing another returns that one.
    pub fn unique_key(mut self, key: impl Into<String>) -> NewTask {
        self.unique_key = Some(key.into());
        self
    }

    /// With a unique key: the key stays held this long after the enqueue, finished or not.
    pub fn unique_for(mut self, window: SignedDuration) -> NewTask {
        self.unique_for = Some(window);
        self
    }

    /// With a unique key: runs once the key has been quiet this long (see
    /// [`NewTask::debounce`]'s field).
    pub fn debounce(mut self, quiet: SignedDuration) -> NewTask {
        self.debounce = Some(quiet);
        self
    }

    /// Retries wait `base`, doubling up to `max` (with jitter), instead of the default.
    pub fn backoff(mut self, base: SignedDuration, max: SignedDuration) -> NewTask {
        self.backoff = Some(Backoff { base, max });
        self
    }

    /// Checks everything that can be checked without a store.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_fields()?;
        let size = serde_json::to_vec(&self.payload)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        check_payload_size(size)
    }

    /// Checks everything [`validate`](Self::validate) checks but the payload's size, for a
    /// caller that serializes the payload anyway and gives its length to
    /// [`check_payload_size`].
    pub fn validate_fields(&self) -> Result<(), SpecError> {
        validate_name("kind", &self.kind)?;
        validate_name("queue", &self.queue)?;
        if self.max_attempts < 1 {
            return Err(SpecError::new(format!(
                "max_attempts must be at least 1, got {}",
                self.max_attempts
            )));
        }
        if let Some(t) = self.timeout {
            if t <= SignedDuration::ZERO {
                return Err(SpecError::new("timeout must be positive"));
            }
            crate::check_duration("timeout", t)?;
        }
        for (name, k) in [("unique_key", &self.unique_key), ("key", &self.key)] {
            if let Some(k) = k {
                if k.is_empty() || k.chars().count() > MAX_KEY_CHARS {
                    return Err(SpecError::new(format!(
                        "{name} must be 1 to {MAX_KEY_CHARS} characters long"
                    )));
                }
            }
        }
        for (name, d) in [("unique_for", self.unique_for), ("debounce", self.debounce)] {
            let Some(d) = d else { continue };
            if self.unique_key.is_none() {
                return Err(SpecError::new(format!("{name} needs a unique_key")));
            }
            if d <= SignedDuration::ZERO {
                return Err(SpecError::new(format!("{name} must be positive")));
            }
            crate::check_duration(name, d)?;
        }
        if self.unique_for.is_some() && self.debounce.is_some() {
            return Err(SpecError::new(
                "unique_for and debounce do not go together: a debounced key is held until its task starts",
            ));
        }
        if let Some(b) = self.backoff {
            if b.base <= SignedDuration::ZERO || b.max < b.base {
                return Err(SpecError::new("backoff needs base > 0 and max >= base"));
            }
            crate::check_duration("backoff max", b.max)?;
        }
        Ok(())
    }
}

/// A payload of `size` bytes of JSON is within [`MAX_PAYLOAD_BYTES`].
pub fn check_payload_size(size: usize) -> Result<(), SpecError> {
    if size > MAX_PAYLOAD_BYTES {
        return Err(SpecError::new(format!(
            "payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Names of kinds, queues and schedules: 1 to 128 characters, no control characters.
pub fn validate_name(what: &str, name: &str) -> Result<(), SpecError> {
    if name.is_empty() || name.chars().count() > 128 {
        return Err(SpecError::new(format!(
            "{what} must be 1 to 128 characters long"
        )));
    }
    if name
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '/')
    {
        return Err(SpecError::new(format!(
            "{what} {name:?} contains whitespace, '/' or a control character"
        )));
    }
    Ok(())
}

/// One attempt at running a task, as recorded in its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: i32,
    pub worker: String,
    pub started_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// `succeeded`, `failed`, `snoozed`, `cancelled` or `rescued`.
    pub outcome: String,
    pub error: Option<String>,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub queue: String,
    pub kind: String,
    /// Null in lists that leave payloads out.
    #[serde(default)]
    pub payload: serde_json::Value,
    pub priority: i32,
    pub state: TaskState,
    pub run_at: Timestamp,
    pub attempt: i32,
    pub max_attempts: i32,
    #[serde(with = "crate::serde_duration::option")]
    pub timeout: Option<SignedDuration>,
    pub unique_key: Option<String>,
    pub backoff: Option<Backoff>,
    pub schedule: Option<String>,
    pub nominal_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub lease_expires_at: Option<Timestamp>,
    pub worker: Option<String>,
    pub cancel_requested: bool,
    pub last_error: Option<String>,
    pub result: Option<serde_json::Value>,
    /// Its concurrency key, if it has one.
    #[serde(default)]
    pub key: Option<String>,
    /// Filled by single-task reads; empty in lists.
    #[serde(default)]
    pub attempts: Vec<Attempt>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_allow_only_their_from_states() {
        for t in [
            Transition::Stage,
            Transition::Claim,
            Transition::Complete,
            Transition::Fail,
            Transition::Snooze,
            Transition::Cancel,
            Transition::RequestCancel,
            Transition::Rescue,
            Transition::Retry,
            Transition::Reschedule,
        ] {
            for s in TaskState::ALL {
                assert_eq!(
                    t.check(s).is_ok(),
                    t.from_states().contains(&s),
                    "{t:?} from {s}"
                );
            }
        }
        assert!(Transition::Claim.check(TaskState::Running).is_err());
        let err = Transition::Cancel.check(TaskState::Succeeded).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot cancel a task that is succeeded (only a task that is scheduled or available or retrying)"
        );
    }

    #[test]
    fn failure_retries_until_attempts_run_out() {
        assert_eq!(state_after_failure(1, 3, true), TaskState::Retrying);
        assert_eq!(state_after_failure(3, 3, true), TaskState::Dead);
        assert_eq!(state_after_failure(1, 3, false), TaskState::Dead);
    }

    #[test]
    fn new_task_validation_names_the_problem() {
        let mut t = NewTask::new("email");
        assert!(t.validate().is_ok());
        t.max_attempts = 0;
        assert!(t.validate().unwrap_err().message().contains("max_attempts"));
        let mut t = NewTask::new("");
        assert!(t.validate().unwrap_err().message().contains("kind"));
        t.kind = "k".into();
        t.payload = serde_json::Value::String("x".repeat(MAX_PAYLOAD_BYTES + 1));
        assert!(t.validate().unwrap_err().message().contains("payload"));
    }

    #[test]
    fn state_names_round_trip() {
        for s in TaskState::ALL {
            assert_eq!(TaskState::parse(s.as_str()).unwrap(), s);
        }
        assert!(TaskState::parse("done").is_err());
    }
}
