//! The worker protocol's batch messages, shared by the HTTP server and the remote client so
//! that both sides read and write one definition. Documented in `docs/worker-protocol.md`.

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use sked_core::{TaskId, TaskState, format_duration, parse_duration};
use sked_store::FinishOutcome;

/// How a worker ended an attempt, before the engine turns it into a [`FinishOutcome`] (a
/// snooze is a delay here; the engine fixes the time on its own clock).
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Succeeded(Option<serde_json::Value>),
    Failed { error: String, retryable: bool },
    Snoozed(SignedDuration),
    Cancelled,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeName {
    Succeeded,
    Failed,
    Snoozed,
    Cancelled,
    Released,
}

/// One ended attempt in `POST /v1/finish`: flat, with the fields its outcome needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishItem {
    pub id: TaskId,
    pub attempt: i32,
    pub outcome: OutcomeName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// A snooze's delay, like `"5m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
}

impl FinishItem {
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    pub results: Vec<FinishItem>,
}

/// What became of one ended attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finished {
    pub id: TaskId,
    pub state: TaskState,
}

/// A task held by a worker, named by its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub id: TaskId,
    pub attempt: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    pub tasks: Vec<Held>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ttl: Option<String>,
}

/// An error of one item of a batch, with the same codes as whole requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemError {
    pub code: String,
    pub message: String,
}

/// One result of a batch: the value, or `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ItemResult<T> {
    Err { error: ItemError },
    Ok(T),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchReply<T> {
    pub results: Vec<ItemResult<T>>,
}

/// `GET /v1/work`: the server's work counter, which grows whenever tasks may have become
/// claimable.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WorkReply {
    pub epoch: u64,
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
        assert!(matches!(&r.results[1], ItemResult::Err { error } if error.code == "stale_lease"));
    }
}
