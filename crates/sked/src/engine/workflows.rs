//! Workflows: checked, put in an order to insert, made in one transaction; read, waited for
//! and cancelled as a whole.

use std::time::Duration;

use sked_core::{NewWorkflow, TaskId, TaskState, WorkflowId, WorkflowTask};
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
        let mut order = InsertOrder::of(&workflow)?;
        let now = self.now();
        // Each task is moved once, into its place in insert order, not copied: a workflow may
        // have 100,000. The vector is sized first: collected through a filter, it would grow
        // by copying itself (7.5 ms of the 12 this took for 10,000 tasks).
        let NewWorkflow { name, tasks: given } = workflow;
        let names: Vec<String> = given.iter().map(|t| t.name.clone()).collect();
        let mut slots: Vec<Option<WorkflowTask>> = given.into_iter().map(Some).collect();
        let mut inserts: Vec<WorkflowTaskInsert> = Vec::with_capacity(order.order.len());
        for &i in &order.order {
            let t = slots[i].take().expect("each task once in insert order");
            inserts.push(WorkflowTaskInsert {
                name: t.name,
                after: std::mem::take(&mut order.parents[i]),
                insert: t.task.into(),
            });
        }
        let spans =
            (self.inner.config.telemetry).enqueue(inserts.iter_mut().map(|t| &mut t.insert.task));
        let tasks = || inserts.iter().map(|t| &t.insert.task);
        let queues = super::tasks::enqueued_per_queue(tasks());
        let first_timed = tasks().filter_map(|t| t.run_at).filter(|t| *t > now).min();
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
