//! Workflows: checked, put in an order to insert, made in one transaction; read, waited for
//! and cancelled as a whole.

use std::time::Duration;

use sked_core::{NewTask, NewWorkflow, TaskId, TaskState, WorkflowId};
use sked_store::rules::workflows::InsertOrder;
use sked_store::{
    BulkAction, BulkFilter, Page, WorkflowCreateParams, WorkflowInfo, WorkflowListParams,
    WorkflowNode, WorkflowTaskInsert, WorkflowTasksParams,
};

use super::Engine;
use crate::{Error, Result};

/// How often a wait on a workflow reads it again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// A workflow made: its id and its tasks' ids, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowMade {
    /// The workflow's id.
    pub id: WorkflowId,
    /// Each task's name and id, in the order the workflow gave them.
    pub tasks: Vec<(String, TaskId)>,
}

impl Engine {
    /// Makes a workflow's tasks in one transaction, all or nothing: a name given twice, an
    /// unknown name in `after`, a cycle or a task that does not exist in `depends_on` is
    /// `Invalid`, naming it, and nothing is made.
    pub async fn workflow_create(&self, workflow: NewWorkflow) -> Result<WorkflowMade> {
        let order = InsertOrder::of(&workflow)?;
        let mut parents = order.parents(&workflow);
        let now = self.now();
        // The tasks are moved, in insert order, not copied: a workflow may have 100,000.
        let NewWorkflow { name, tasks: given } = workflow;
        let (mut names, mut slots) = (
            Vec::with_capacity(given.len()),
            Vec::with_capacity(given.len()),
        );
        for t in given {
            names.push(t.name);
            slots.push(Some(t.task));
        }
        let mut tasks: Vec<NewTask> = (order.order.iter())
            .filter_map(|&i| slots[i].take())
            .collect();
        let spans = self.inner.config.telemetry.enqueue(&mut tasks);
        let queues = super::tasks::enqueued_per_queue(&tasks);
        let first_timed = tasks
            .iter()
            .filter_map(|t| t.run_at)
            .filter(|t| *t > now)
            .min();
        let inserts: Vec<WorkflowTaskInsert> = (order.order.iter().zip(tasks))
            .map(|(&i, task)| WorkflowTaskInsert {
                name: names[i].clone(),
                after: std::mem::take(&mut parents[i]),
                insert: task.into(),
            })
            .collect();
        let made = self
            .inner
            .store
            .workflow_create(WorkflowCreateParams {
                name,
                tasks: inserts,
                schedule: None,
                nominal_at: None,
                now,
            })
            .await
            .map_err(Error::from);
        spans.end(&made.as_ref().map(|_| Vec::<()>::new()));
        let made = made?;
        for (queue, n) in queues {
            self.inner.metrics.enqueued(&queue, n);
        }
        if first_timed.is_some() {
            self.saw_waiting(first_timed);
        }
        self.wake_workers();
        let tasks = (names.into_iter().enumerate())
            .map(|(i, name)| (name, made.tasks[order.position[i]]))
            .collect();
        Ok(WorkflowMade { id: made.id, tasks })
    }

    /// A workflow with its tasks counted by state.
    pub async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        Ok(self.inner.store.workflow_get(id).await?)
    }

    /// Workflows, newest first: at most `limit` (1 to 1,000) with ids below `before`.
    pub async fn workflows(
        &self,
        before: Option<WorkflowId>,
        limit: u32,
    ) -> Result<Page<WorkflowInfo>> {
        Ok(self
            .inner
            .store
            .workflow_list(WorkflowListParams {
                before_id: before,
                limit: sked_store::rules::list_limit(Some(limit)),
            })
            .await?)
    }

    /// A page of a workflow's tasks in the order they were made (ids above `after`), each
    /// with the names of the tasks of the workflow it waits for.
    pub async fn workflow_tasks(
        &self,
        id: WorkflowId,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<Page<WorkflowNode>> {
        Ok(self
            .inner
            .store
            .workflow_tasks(WorkflowTasksParams {
                id,
                after_id: after,
                limit: sked_store::rules::list_limit(Some(limit)),
            })
            .await?)
    }

    /// The workflow once every task has ended, or as it is when `wait` has passed first.
    pub async fn workflow_wait(&self, id: WorkflowId, wait: Duration) -> Result<WorkflowInfo> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let w = self.workflow(id).await?;
            let now = tokio::time::Instant::now();
            if w.done || now >= deadline {
                return Ok(w);
            }
            tokio::time::sleep(LOOK_EVERY.min(deadline - now)).await;
        }
    }

    /// Cancels every task of the workflow that has not ended (a running one is asked to
    /// stop), batch after batch; the workflow as it is then.
    pub async fn workflow_cancel(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        self.workflow(id).await?;
        let filter = BulkFilter {
            states: (TaskState::ALL.into_iter())
                .filter(|s| !s.is_finished())
                .collect(),
            workflow: Some(id),
            ..BulkFilter::default()
        };
        let mut after = None;
        loop {
            let batch = self
                .task_bulk(BulkAction::Cancel, filter.clone(), after, 1000)
                .await?;
            match batch.next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        self.workflow(id).await
    }
}
