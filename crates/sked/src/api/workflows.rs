//! The wire types of `/v1/workflows`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sked_core::{TaskId, WorkflowId};
use sked_store::{WorkflowInfo, WorkflowNode};

/// The answer to `POST /v1/workflows`: the workflow's id and each task's id by its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowCreated {
    /// The workflow's id.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: WorkflowId,
    /// Each task's id, by its name in the workflow.
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, i64>))]
    pub tasks: BTreeMap<String, TaskId>,
}

impl From<crate::WorkflowMade> for WorkflowCreated {
    fn from(m: crate::WorkflowMade) -> WorkflowCreated {
        WorkflowCreated {
            id: m.id,
            tasks: m.tasks.into_iter().collect(),
        }
    }
}

/// `GET /v1/workflows`: workflows, newest first, each with its tasks counted by state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowList {
    /// The workflows, newest first.
    pub workflows: Vec<WorkflowInfo>,
    /// When more workflows follow: the `before` that asks for the next page.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_before: Option<WorkflowId>,
}

/// `GET /v1/workflows/{id}/tasks`: a workflow's tasks in the order they were made, each with
/// the names of the tasks of the workflow it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowTaskList {
    /// The tasks, in the order they were made.
    pub tasks: Vec<WorkflowNode>,
    /// When more tasks follow: the `after` that asks for the next page.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_after: Option<TaskId>,
}
