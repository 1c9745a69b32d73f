//! What a parent's end does to the tasks waiting for it, and how a task with parents starts
//! its life (docs/decisions/0012-tasks-that-wait-for-tasks.md,
//! 0022-tasks-with-the-same-parents-wait-together.md). Both stores apply these: they read the
//! rows, call these, and write what they say.

use jiff::Timestamp;
use sked_core::{ParentFailure, TaskId, TaskState};

use super::state_for_run_at;

/// Why a child is cancelled when `parent` ended in `state`.
pub fn parent_failed(parent: TaskId, state: TaskState) -> String {
    match state {
        TaskState::Cancelled => format!("parent {parent} was cancelled"),
        TaskState::Expired => format!("parent {parent} expired before it started"),
        _ => format!("parent {parent} ended {state}"),
    }
}

/// A failed end (dead, cancelled or expired) among `ends`, the first by parent id.
fn first_failure(ends: &[(TaskId, TaskState)]) -> Option<(TaskId, TaskState)> {
    ends.iter()
        .filter(|(_, s)| {
            matches!(
                s,
                TaskState::Dead | TaskState::Cancelled | TaskState::Expired
            )
        })
        .min_by_key(|(id, _)| *id)
        .copied()
}

/// What the ends of some of their parents do to the tasks of a wait: the tasks that share
/// one count of parents and one failure rule (docs/decisions/0022-tasks-with-the-same-parents-wait-together.md).
#[derive(Debug, Clone, PartialEq)]
pub enum WaitChange {
    /// They wait for the parents left.
    Wait { parents_left: i32 },
    /// Every parent is counted: each of them is due (`available`) or waits for its run time
    /// (`scheduled`), as [`state_for_run_at`] says for its own run time.
    Release,
    /// A parent failed and the tasks were to be cancelled then; `error` says which parent.
    Cancel { error: String },
}

/// What `ends` (parents and the state each ended in, each counted once) do to tasks that wait
/// for `parents_left` parents not yet counted, with `on_parent_failure`.
pub fn count(
    parents_left: i32,
    on_parent_failure: ParentFailure,
    ends: &[(TaskId, TaskState)],
) -> WaitChange {
    if on_parent_failure == ParentFailure::Cancel
        && let Some((parent, state)) = first_failure(ends)
    {
        return WaitChange::Cancel {
            error: parent_failed(parent, state),
        };
    }
    let left = parents_left - ends.len() as i32;
    if left > 0 {
        WaitChange::Wait { parents_left: left }
    } else {
        WaitChange::Release
    }
}

/// How a new task with parents starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub state: TaskState,
    /// Its parents not yet ended.
    pub parents_left: i32,
    /// With `state` cancelled: why.
    pub error: Option<String>,
}

/// A new task's parents, each with its state (`None`: there is no such task).
pub type ParentStates = Vec<(TaskId, Option<TaskState>)>;

/// How a new task starts whose parents are in `parents` (each with its state; `None`: there
/// is no such task, which is refused).
pub fn at_enqueue(
    parents: &[(TaskId, Option<TaskState>)],
    on_parent_failure: ParentFailure,
    run_at: Timestamp,
    now: Timestamp,
) -> crate::Result<Start> {
    let mut ended = Vec::with_capacity(parents.len());
    let mut left = 0;
    for &(id, state) in parents {
        match state {
            None => {
                return Err(crate::StoreError::Invalid(format!(
                    "depends_on: no task {id}"
                )));
            }
            Some(s) if s.is_finished() => ended.push((id, s)),
            Some(_) => left += 1,
        }
    }
    if on_parent_failure == ParentFailure::Cancel
        && let Some((parent, state)) = first_failure(&ended)
    {
        return Ok(Start {
            state: TaskState::Cancelled,
            parents_left: left,
            error: Some(parent_failed(parent, state)),
        });
    }
    Ok(Start {
        state: if left > 0 {
            TaskState::Waiting
        } else {
            state_for_run_at(run_at, now)
        },
        parents_left: left,
        error: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskState::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn the_last_parent_to_succeed_releases_the_wait() {
        let c = ParentFailure::Cancel;
        assert_eq!(
            count(2, c, &[(1, Succeeded)]),
            WaitChange::Wait { parents_left: 1 }
        );
        assert_eq!(
            count(2, c, &[(1, Succeeded), (2, Succeeded)]),
            WaitChange::Release
        );
    }

    #[test]
    fn a_failed_parent_cancels_the_wait_or_counts_as_done() {
        let c = ParentFailure::Cancel;
        assert_eq!(
            count(3, c, &[(7, Succeeded), (5, Dead), (4, Cancelled)]),
            WaitChange::Cancel {
                error: "parent 4 was cancelled".into()
            },
            "the first failed parent by id is named"
        );
        assert_eq!(
            count(3, c, &[(5, Dead)]),
            WaitChange::Cancel {
                error: "parent 5 ended dead".into()
            }
        );
        assert_eq!(
            count(3, c, &[(6, Expired)]),
            WaitChange::Cancel {
                error: "parent 6 expired before it started".into()
            }
        );
        let run = ParentFailure::Run;
        assert_eq!(
            count(2, run, &[(5, Dead)]),
            WaitChange::Wait { parents_left: 1 }
        );
        assert_eq!(
            count(2, run, &[(5, Dead), (6, Cancelled)]),
            WaitChange::Release
        );
    }

    #[test]
    fn a_new_task_starts_from_its_parents_states() {
        let now = t(10);
        let start = |parents: &[(TaskId, Option<TaskState>)], then, run_at| {
            at_enqueue(parents, then, run_at, now)
                .map(|s| (s.state, s.parents_left, s.error))
                .map_err(|e| e.to_string())
        };
        let c = ParentFailure::Cancel;
        assert_eq!(
            start(&[(1, Some(Succeeded)), (2, Some(Running))], c, now),
            Ok((Waiting, 1, None))
        );
        assert_eq!(
            start(&[(1, Some(Succeeded))], c, now),
            Ok((Available, 0, None)),
            "a parent that already succeeded counts at once"
        );
        assert_eq!(
            start(&[(1, Some(Succeeded))], c, t(99)),
            Ok((Scheduled, 0, None))
        );
        assert_eq!(
            start(&[(1, Some(Dead)), (2, Some(Waiting))], c, now),
            Ok((Cancelled, 1, Some("parent 1 ended dead".into())))
        );
        assert_eq!(
            start(
                &[(1, Some(Dead)), (2, Some(Waiting))],
                ParentFailure::Run,
                now
            ),
            Ok((Waiting, 1, None))
        );
        assert_eq!(
            start(&[(1, Some(Succeeded)), (9, None)], c, now),
            Err("invalid input: depends_on: no task 9".into())
        );
    }
}
