//! The types of batches: tasks tagged together, with callbacks enqueued once when they end.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sked_core::{BatchId, NewBatch, NewTask, TaskId, TaskState};

#[derive(Debug, Clone)]
pub struct BatchOpenParams {
    /// Checked ([`NewBatch::validate`]).
    pub batch: NewBatch,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct BatchCloseParams {
    pub id: BatchId,
    pub now: Timestamp,
}

/// Where a batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// It takes tasks; its callbacks wait for it to be closed.
    Open,
    /// Closed: its callbacks are enqueued when its tasks have ended. Its own tasks may still
    /// add tasks to it (fan-out in stages) until then.
    Closed,
    /// Its tasks ended after it was closed, and its callbacks were enqueued: it takes no more.
    Done,
}

impl BatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Open => "open",
            BatchState::Closed => "closed",
            BatchState::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<BatchState> {
        match s {
            "open" => Some(BatchState::Open),
            "closed" => Some(BatchState::Closed),
            "done" => Some(BatchState::Done),
            _ => None,
        }
    }
}

/// A batch, its tasks counted by state, and its callbacks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchInfo {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: BatchId,
    pub name: Option<String>,
    pub state: BatchState,
    /// How many tasks joined it.
    pub total: u64,
    /// Its tasks per state (states with none are left out); tasks removed by retention are
    /// counted in none.
    pub counts: BTreeMap<TaskState, u64>,
    pub created_at: Timestamp,
    pub closed_at: Option<Timestamp>,
    /// When its callbacks were enqueued.
    pub done_at: Option<Timestamp>,
    /// The callbacks as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<NewTask>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<NewTask>,
    /// The tasks the callbacks became, once enqueued (`on_success` only when every task
    /// succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub on_success_task: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub on_complete_task: Option<TaskId>,
}

impl crate::page::Listed for BatchInfo {
    fn listed_bytes(&self) -> usize {
        let callback = |t: &Option<NewTask>| {
            t.as_ref().map_or(0, |t| {
                256 + serde_json::to_vec(&t.payload).map_or(0, |v| v.len())
            })
        };
        256 + self.name.as_ref().map_or(0, String::len)
            + callback(&self.on_success)
            + callback(&self.on_complete)
    }
}

#[derive(Debug, Clone, Default)]
pub struct BatchListParams {
    /// Only batches with a smaller id (for paging): newest first.
    pub before_id: Option<BatchId>,
    pub limit: u32,
}
