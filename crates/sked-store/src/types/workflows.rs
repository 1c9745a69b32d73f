//! The types of workflows: tasks made together that wait for one another.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sked_core::{TaskId, TaskState, WorkflowId};

use crate::TaskInsert;

/// A workflow to insert, checked and ordered ([`sked_core::NewWorkflow::layers`]).
#[derive(Debug, Clone)]
pub struct WorkflowCreateParams {
    pub name: Option<String>,
    /// Its tasks, each after every task it waits for.
    pub tasks: Vec<WorkflowTaskInsert>,
    /// The schedule and occurrence that made it, if one did.
    pub schedule: Option<String>,
    pub nominal_at: Option<Timestamp>,
    pub now: Timestamp,
}

/// One task of a workflow to insert.
#[derive(Debug, Clone)]
pub struct WorkflowTaskInsert {
    /// Its name in the workflow.
    pub name: String,
    /// The positions in [`WorkflowCreateParams::tasks`] of the tasks it waits for, all before
    /// its own (besides the ids in its `depends_on`).
    pub after: Vec<usize>,
    pub insert: TaskInsert,
}

/// What one run of a schedule inserts: a task, or a workflow.
#[derive(Debug, Clone)]
pub enum RunInsert {
    Task(Box<TaskInsert>),
    Workflow(WorkflowCreateParams),
}

/// A run inserted: its first task (the one its ledger line names) and every task with its
/// queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMade {
    pub first: TaskId,
    pub tasks: Vec<(String, TaskId)>,
}

impl RunMade {
    /// The run of one task, inserted as `id`.
    pub fn of_task(t: &TaskInsert, id: TaskId) -> RunMade {
        RunMade {
            first: id,
            tasks: vec![(t.task.queue.clone(), id)],
        }
    }

    /// The queues of workflow `w`'s tasks, in order.
    pub fn of_workflow_queues(w: &WorkflowCreateParams) -> Vec<String> {
        w.tasks
            .iter()
            .map(|t| t.insert.task.queue.clone())
            .collect()
    }

    /// The run of a workflow whose tasks go to `queues`, in order, inserted as `made`.
    pub fn of(queues: Vec<String>, made: WorkflowCreated) -> RunMade {
        RunMade {
            first: made.tasks[0],
            tasks: queues.into_iter().zip(made.tasks).collect(),
        }
    }
}

/// Runs to insert split by what they are, each with its place among them.
#[derive(Debug, Default)]
pub struct SplitRuns {
    /// Inserted together.
    pub tasks: Vec<(usize, TaskInsert)>,
    /// Inserted each on its own.
    pub workflows: Vec<(usize, WorkflowCreateParams)>,
}

impl SplitRuns {
    pub fn of(runs: Vec<RunInsert>) -> SplitRuns {
        let mut split = SplitRuns::default();
        for (i, run) in runs.into_iter().enumerate() {
            match run {
                RunInsert::Task(t) => split.tasks.push((i, *t)),
                RunInsert::Workflow(w) => split.workflows.push((i, w)),
            }
        }
        split
    }
}

/// A workflow inserted: its id and its tasks' ids, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowCreated {
    pub id: WorkflowId,
    pub tasks: Vec<TaskId>,
}

/// Where a workflow stands, from its tasks' states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WorkflowState {
    /// A task has not ended.
    Active,
    /// Every task succeeded.
    Succeeded,
    /// Every task ended and one died or expired (it never ran).
    Failed,
    /// Every task ended, none died or expired, one was cancelled.
    Cancelled,
}

impl WorkflowState {
    /// The state of a workflow whose tasks have these counts.
    pub fn of(counts: &BTreeMap<TaskState, u64>) -> WorkflowState {
        let has = |s: TaskState| counts.get(&s).is_some_and(|n| *n > 0);
        if counts.iter().any(|(s, n)| *n > 0 && !s.is_finished()) {
            WorkflowState::Active
        } else if has(TaskState::Dead) || has(TaskState::Expired) {
            WorkflowState::Failed
        } else if has(TaskState::Cancelled) {
            WorkflowState::Cancelled
        } else {
            WorkflowState::Succeeded
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Active => "active",
            WorkflowState::Succeeded => "succeeded",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }
}

/// A workflow and how far along its tasks are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowInfo {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: WorkflowId,
    pub name: Option<String>,
    pub created_at: Timestamp,
    pub state: WorkflowState,
    /// Whether every task has ended.
    pub done: bool,
    /// How many tasks it was made with.
    pub total: u64,
    /// Its tasks per state (states with none are left out). Tasks removed by retention are
    /// counted in none.
    pub counts: BTreeMap<TaskState, u64>,
    /// When its last task ended, once every task has.
    pub finished_at: Option<Timestamp>,
    /// The schedule that started it, if one did, and the occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominal_at: Option<Timestamp>,
}

impl WorkflowInfo {
    /// Fills `state` and `done` from `counts`.
    pub fn settle(mut self) -> WorkflowInfo {
        self.state = WorkflowState::of(&self.counts);
        self.done = self.state != WorkflowState::Active;
        if !self.done {
            self.finished_at = None;
        }
        self
    }
}

impl crate::page::Listed for WorkflowInfo {
    fn listed_bytes(&self) -> usize {
        256 + self.name.as_ref().map_or(0, String::len)
            + self.schedule.as_ref().map_or(0, String::len)
    }
}

#[derive(Debug, Clone, Default)]
pub struct WorkflowListParams {
    /// Only workflows with a smaller id (for paging): newest first.
    pub before_id: Option<WorkflowId>,
    pub limit: u32,
}

/// One task of a workflow, as its graph shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowNode {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    /// Its name in the workflow.
    pub name: String,
    pub kind: String,
    pub state: TaskState,
    /// The tasks of the workflow it waits for, by name.
    #[serde(default)]
    pub after: Vec<String>,
}

impl crate::page::Listed for WorkflowNode {
    fn listed_bytes(&self) -> usize {
        64 + self.name.len()
            + self.kind.len()
            + self.after.iter().map(|a| a.len() + 3).sum::<usize>()
    }
}

#[derive(Debug, Clone)]
pub struct WorkflowTasksParams {
    pub id: WorkflowId,
    /// Only tasks with a larger id (for paging): in the order they were made.
    pub after_id: Option<TaskId>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_is_as_its_worst_ended_task() {
        let of = |counts: &[(TaskState, u64)]| WorkflowState::of(&counts.iter().copied().collect());
        use TaskState::*;
        assert_eq!(of(&[(Succeeded, 2), (Running, 1)]), WorkflowState::Active);
        assert_eq!(of(&[(Succeeded, 3)]), WorkflowState::Succeeded);
        assert_eq!(
            of(&[(Succeeded, 1), (Cancelled, 1)]),
            WorkflowState::Cancelled
        );
        assert_eq!(of(&[(Cancelled, 1), (Expired, 1)]), WorkflowState::Failed);
        assert_eq!(of(&[(Cancelled, 1), (Dead, 1)]), WorkflowState::Failed);
    }
}
