//! A task's deadline to start (`expires_at`), as both backends apply it: claims never start a
//! task past its deadline, and such a task ends `expired` (see [`crate::Store::task_expire`]).

use jiff::Timestamp;
use sked_core::Task;

/// The condition "the task may start at `now`" (an SQL expression for the time): it has no
/// deadline, started before (its retries are not held to it), or its deadline is later.
pub fn startable(now: &str) -> String {
    format!("(expires_at IS NULL OR attempt > 0 OR expires_at > {now})")
}

/// Whether `task` may start at `now`, as [`startable`] says.
pub fn may_start(task: &Task, now: Timestamp) -> bool {
    task.expires_at.is_none_or(|at| at > now) || task.attempt > 0
}

/// The error an expired task keeps as its `last_error`: why it never ran.
pub const REASON: &str = "not started by its deadline (expires_at)";
