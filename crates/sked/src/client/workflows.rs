//! [`Client`]'s workflow calls: create a workflow, read it and its tasks, wait for it, cancel
//! it.

use std::time::Duration;

use sked_core::{NewWorkflow, TaskId, WorkflowId};
use sked_store::WorkflowInfo;

use super::{Client, Inner};
use crate::Result;
use crate::api::{WorkflowCreated, WorkflowList, WorkflowTaskList};

impl Client {
    /// Makes a workflow's tasks in one transaction, all or nothing; its id and each task's id
    /// by name.
    pub async fn workflow_create(&self, workflow: &NewWorkflow) -> Result<WorkflowCreated> {
        match &self.inner {
            Inner::Embedded(e) => Ok(e.workflow_create(workflow.clone()).await?.into()),
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post("/v1/workflows", workflow).await,
        }
    }

    /// A workflow with its tasks counted by state.
    pub async fn workflow(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.workflow(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get(&format!("/v1/workflows/{id}"), &[]).await,
        }
    }

    /// The workflow once every task has ended, or as it is when `wait` has passed first. A
    /// server holds one request at most its `--max-wait` (60 s by default).
    pub async fn workflow_wait(&self, id: WorkflowId, wait: Duration) -> Result<WorkflowInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.workflow_wait(id, wait).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.wait(&format!("/v1/workflows/{id}"), wait).await,
        }
    }

    /// A page of workflows, newest first: at most `limit` (up to 1,000), with ids below
    /// `before`.
    pub async fn workflows(&self, before: Option<WorkflowId>, limit: u32) -> Result<WorkflowList> {
        match &self.inner {
            Inner::Embedded(e) => {
                let page = e.workflows(before, limit).await?;
                let next_before = page.items.last().filter(|_| page.more).map(|w| w.id);
                Ok(WorkflowList {
                    workflows: page.items,
                    next_before,
                })
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut query = vec![("limit", limit.to_string())];
                query.extend(before.map(|b| ("before", b.to_string())));
                r.get("/v1/workflows", &query).await
            }
        }
    }

    /// A page of a workflow's tasks in the order they were made (ids above `after`), each
    /// with the names of the tasks of the workflow it waits for.
    pub async fn workflow_tasks(
        &self,
        id: WorkflowId,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<WorkflowTaskList> {
        match &self.inner {
            Inner::Embedded(e) => {
                let page = e.workflow_tasks(id, after, limit).await?;
                let next_after = page.items.last().filter(|_| page.more).map(|n| n.id);
                Ok(WorkflowTaskList {
                    tasks: page.items,
                    next_after,
                })
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut query = vec![("limit", limit.to_string())];
                query.extend(after.map(|a| ("after", a.to_string())));
                r.get(&format!("/v1/workflows/{id}/tasks"), &query).await
            }
        }
    }

    /// Cancels every task of the workflow that has not ended (a running one is asked to
    /// stop); the workflow as it is then.
    pub async fn workflow_cancel(&self, id: WorkflowId) -> Result<WorkflowInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.workflow_cancel(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.post(
                    &format!("/v1/workflows/{id}/cancel"),
                    &serde_json::json!({}),
                )
                .await
            }
        }
    }
}
