//! The worker protocol's messages, shared by the HTTP server and the remote client so that
//! both sides read and write one definition. Documented in `docs/worker-protocol.md`.

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use sked_core::{Task, TaskId, TaskState, format_duration, parse_duration};
use sked_store::FinishOutcome;

use super::ErrorDetail;

/// `POST /v1/claim`: up to `max` due tasks, waiting up to `wait` for one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The claiming worker's id.
    #[cfg_attr(feature = "openapi", schema(value_type = sked_core::openapi::Name))]
    pub worker: String,
    /// Queues to claim from (all when empty).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<sked_core::openapi::Name>, max_items = 100))]
    pub queues: Vec<String>,
    /// Kinds the worker runs (any when empty).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<sked_core::openapi::Name>, max_items = 100))]
    pub kinds: Vec<String>,
    /// At most this many (1 to 1000).
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(default = 1, minimum = 1, maximum = 1000))]
    pub max: u32,
    /// Only tasks of at least this priority.
    #[serde(default)]
    pub min_priority: Option<i32>,
    /// Long-poll: how long to wait for a task (`"30s"`); none means answer at once.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub wait: Option<String>,
    /// Lease length (`"30s"`); the server's default when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub lease_ttl: Option<String>,
}

fn one() -> u32 {
    1
}

/// The answer to a claim: the tasks claimed, each `running` with a new attempt number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Claimed {
    /// The tasks.
    pub tasks: Vec<Task>,
}

/// `POST /v1/tasks/{id}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The attempt held.
    pub attempt: i32,
    /// A new lease length (`"30s"`); the server's default when absent.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub lease_ttl: Option<String>,
    /// How far the attempt has come: a number from 0 to 100, or a JSON object (at most 4 KiB;
    /// its `percent`, if any, from 0 to 100). The task shows the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

/// `POST /v1/tasks/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Complete {
    /// The attempt held.
    pub attempt: i32,
    /// Stored as the task's result.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
}

/// `POST /v1/tasks/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Fail {
    /// The attempt held.
    pub attempt: i32,
    /// What went wrong.
    pub error: String,
    /// `false` ends the task as dead at once.
    #[serde(default = "yes")]
    #[cfg_attr(feature = "openapi", schema(default = true))]
    pub retryable: bool,
}

fn yes() -> bool {
    true
}

/// `POST /v1/tasks/{id}/snooze`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Snooze {
    /// The attempt held.
    pub attempt: i32,
    /// How long to wait (`"5m"`).
    #[cfg_attr(feature = "openapi", schema(value_type = sked_core::openapi::Duration))]
    pub delay: String,
}

/// `POST /v1/tasks/{id}/release` and `/cancelled`: the attempt, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Attempt))]
#[serde(deny_unknown_fields)]
pub struct AttemptRef {
    /// The attempt held.
    pub attempt: i32,
}

/// How a worker ended an attempt, before the engine turns it into a [`FinishOutcome`] (a
/// snooze is a delay here; the engine fixes the time on its own clock).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ending {
    /// It succeeded, with this result.
    Succeeded(Option<serde_json::Value>),
    /// It failed; `retryable: false` makes it dead at once.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether another attempt may succeed.
        retryable: bool,
    },
    /// Run again after this long, without spending an attempt.
    Snoozed(SignedDuration),
    /// Stopped after a cancel request.
    Cancelled,
    /// Given back unstarted or unfinished.
    Released,
}

impl Ending {
    /// The outcome to record, with a snooze's delay counted from `now`.
    pub fn into_outcome(self, now: jiff::Timestamp) -> FinishOutcome {
        match self {
            Ending::Succeeded(result) => FinishOutcome::Succeeded { result },
            Ending::Failed { error, retryable } => FinishOutcome::Failed { error, retryable },
            Ending::Snoozed(d) => FinishOutcome::Snoozed {
                until: now.checked_add(d.max(SignedDuration::ZERO)).unwrap_or(now),
            },
            Ending::Cancelled => FinishOutcome::Cancelled,
            Ending::Released => FinishOutcome::Released,
        }
    }
}

/// The outcome of a [`FinishItem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // Named as the endings are.
#[non_exhaustive]
pub enum OutcomeName {
    Succeeded,
    Failed,
    Snoozed,
    Cancelled,
    Released,
}

/// One ended attempt in `POST /v1/finish`: flat, with the fields its outcome needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FinishItem {
    /// The task.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    /// The attempt held.
    pub attempt: i32,
    /// How it ended.
    pub outcome: OutcomeName,
    /// A success's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// A failure's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether a failure may be retried (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// A snooze's delay, like `"5m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub delay: Option<String>,
}

impl FinishItem {
    /// The item for an ending.
    pub fn new(id: TaskId, attempt: i32, ending: &Ending) -> FinishItem {
        let mut item = FinishItem {
            id,
            attempt,
            outcome: OutcomeName::Succeeded,
            result: None,
            error: None,
            retryable: None,
            delay: None,
        };
        match ending {
            Ending::Succeeded(r) => item.result = r.clone(),
            Ending::Failed { error, retryable } => {
                item.outcome = OutcomeName::Failed;
                item.error = Some(error.clone());
                item.retryable = Some(*retryable);
            }
            Ending::Snoozed(d) => {
                item.outcome = OutcomeName::Snoozed;
                item.delay = Some(format_duration(*d));
            }
            Ending::Cancelled => item.outcome = OutcomeName::Cancelled,
            Ending::Released => item.outcome = OutcomeName::Released,
        }
        item
    }

    /// The ending, checking that the item carries exactly the fields its outcome takes.
    pub fn ending(&self) -> Result<Ending, String> {
        let only = |allowed: &[&str]| -> Result<(), String> {
            let present = [
                ("result", self.result.is_some()),
                ("error", self.error.is_some()),
                ("retryable", self.retryable.is_some()),
                ("delay", self.delay.is_some()),
            ];
            for (field, set) in present {
                if set && !allowed.contains(&field) {
                    return Err(format!(
                        "task {}: field {field:?} does not go with outcome {:?}",
                        self.id, self.outcome
                    ));
                }
            }
            Ok(())
        };
        let missing = |field: &str| format!("task {}: outcome needs {field:?}", self.id);
        Ok(match self.outcome {
            OutcomeName::Succeeded => {
                only(&["result"])?;
                Ending::Succeeded(self.result.clone())
            }
            OutcomeName::Failed => {
                only(&["error", "retryable"])?;
                Ending::Failed {
                    error: self.error.clone().ok_or_else(|| missing("error"))?,
                    retryable: self.retryable.unwrap_or(true),
                }
            }
            OutcomeName::Snoozed => {
                only(&["delay"])?;
                let delay = self.delay.as_deref().ok_or_else(|| missing("delay"))?;
                Ending::Snoozed(
                    parse_duration(delay).map_err(|e| format!("task {}: {e}", self.id))?,
                )
            }
            OutcomeName::Cancelled => {
                only(&[])?;
                Ending::Cancelled
            }
            OutcomeName::Released => {
                only(&[])?;
                Ending::Released
            }
        })
    }
}

/// `POST /v1/finish`: many ended attempts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = FinishMany))]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    /// One item per attempt.
    pub results: Vec<FinishItem>,
}

/// What became of one ended attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Finished {
    /// The task.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    /// Its state now.
    pub state: TaskState,
}

/// A task held by a worker, named by its attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Held {
    /// The task.
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub id: TaskId,
    /// The attempt held.
    pub attempt: i32,
    /// How far the attempt has come, as [`Heartbeat::progress`] says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

/// `POST /v1/heartbeat`: extends the leases of everything a worker holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = HeartbeatMany))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The attempts held.
    #[cfg_attr(feature = "openapi", schema(max_items = 10000))]
    pub tasks: Vec<Held>,
    /// A new lease length (`"30s"`); the server's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub lease_ttl: Option<String>,
}

/// One result of a batch: the value, or `{"error": {...}}` with the same codes as whole
/// requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum ItemResult<T> {
    /// This item failed.
    Err {
        /// Why.
        error: ErrorDetail,
    },
    /// This item's value.
    Ok(T),
}

/// The answer to a batch: one result per item, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchReply<T> {
    /// The results.
    pub results: Vec<ItemResult<T>>,
}

/// `GET /v1/work`: the server's work counter, which grows whenever tasks may have become
/// claimable.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkReply {
    /// The counter now.
    pub epoch: u64,
}

/// `GET /v1/work?after=N&wait=30s`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct WorkQuery {
    /// The counter last seen (0 at first).
    #[serde(default)]
    pub after: u64,
    /// How long to wait for it to pass `after` (`"30s"`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(value_type = Option<sked_core::openapi::Duration>))]
    pub wait: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_items_round_trip_and_reject_stray_fields() {
        let endings = [
            Ending::Succeeded(Some(serde_json::json!({"n": 1}))),
            Ending::Succeeded(None),
            Ending::Failed {
                error: "boom".into(),
                retryable: false,
            },
            Ending::Snoozed(SignedDuration::from_secs(90)),
            Ending::Cancelled,
            Ending::Released,
        ];
        for e in endings {
            let item = FinishItem::new(7, 2, &e);
            let wire = serde_json::to_string(&item).unwrap();
            let back: FinishItem = serde_json::from_str(&wire).unwrap();
            assert_eq!(back.ending().unwrap(), e, "{wire}");
        }
        let stray: FinishItem =
            serde_json::from_str(r#"{"id":1,"attempt":1,"outcome":"succeeded","error":"x"}"#)
                .unwrap();
        assert!(stray.ending().unwrap_err().contains("\"error\""));
        let missing: FinishItem =
            serde_json::from_str(r#"{"id":1,"attempt":1,"outcome":"snoozed"}"#).unwrap();
        assert!(missing.ending().unwrap_err().contains("\"delay\""));
    }

    #[test]
    fn item_results_read_values_and_errors() {
        let r: BatchReply<Finished> = serde_json::from_str(
            r#"{"results":[{"id":1,"state":"succeeded"},{"error":{"code":"stale_lease","message":"m"}}]}"#,
        )
        .unwrap();
        assert!(matches!(
            r.results[0],
            ItemResult::Ok(Finished { id: 1, .. })
        ));
        assert!(
            matches!(&r.results[1], ItemResult::Err { error } if error.code == super::super::ErrorCode::StaleLease)
        );
    }
}
