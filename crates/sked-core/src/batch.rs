//! A batch: tasks tagged with it, and callbacks — tasks enqueued once, when the batch is closed
//! and its tasks have ended (`on_complete`) or all succeeded (`on_success`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::SpecError;
use crate::new_task::{NewTask, validate_name};
use crate::task::TaskState;

/// A batch's id.
pub type BatchId = i64;

/// A batch to open. Read from a JSON object only: every field is optional, and serde would
/// read a struct from an array too (`[null, null]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct NewBatch {
    /// A label for people (not unique), like a kind: 1 to 128 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Name>))]
    pub name: Option<String>,
    /// Enqueued once, when the batch is closed and every task of it has succeeded. Its payload
    /// (an object, or none) gains `batch`: the batch's id and its tasks' counts by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<NewTask>,
    /// Enqueued once, when the batch is closed and every task of it has ended, however. Its
    /// payload gains `batch` as `on_success`'s does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<NewTask>,
}

/// [`NewBatch`]'s fields as an object holds them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    on_success: Option<NewTask>,
    #[serde(default)]
    on_complete: Option<NewTask>,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for NewBatch {
    type Error = serde_json::Error;

    fn try_from(m: serde_json::Map<String, serde_json::Value>) -> Result<Self, Self::Error> {
        let f: BatchFields = serde_json::from_value(serde_json::Value::Object(m))?;
        Ok(NewBatch {
            name: f.name,
            on_success: f.on_success,
            on_complete: f.on_complete,
        })
    }
}

impl NewBatch {
    /// Checks the name and the callbacks: each as an enqueue checks a task, with a payload
    /// that is an object (or none), and none of what would make it more than one task made
    /// once (a unique key, a debounce), wait for other tasks or join a batch.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(name) = &self.name {
            validate_name("batch name", name)?;
        }
        for (what, callback) in [
            ("on_success", &self.on_success),
            ("on_complete", &self.on_complete),
        ] {
            let Some(t) = callback else { continue };
            let named = |e: SpecError| SpecError::new(format!("{what}: {}", e.message()));
            t.validate().map_err(named)?;
            if !(t.payload.is_object() || t.payload.is_null()) {
                return Err(named(SpecError::new(
                    "a callback's payload must be an object (it gains the batch's counts)",
                )));
            }
            // As it will be enqueued, its counts in it: it must go in when the batch ends.
            let mut enqueued = t.clone();
            enqueued.payload = callback_payload(&t.kind, &t.payload, 0, &BTreeMap::new());
            enqueued.validate().map_err(named)?;
            let refused = [
                (t.unique_key.is_some(), "a unique key"),
                (!t.depends_on.is_empty(), "depends_on"),
                (t.batch.is_some(), "a batch"),
            ];
            if let Some((_, field)) = refused.iter().find(|(has, _)| *has) {
                return Err(named(SpecError::new(format!(
                    "a callback cannot have {field}: it is enqueued once, when its batch ends"
                ))));
            }
        }
        Ok(())
    }
}

/// The payload of a batch's callback of `kind`: its template's, with the batch's id and its
/// tasks' counts by state (`{"id": 7, "counts": {"succeeded": 9}}`) where the kind takes them:
/// as `batch` in the payload; for `shell`, as the variables `SKED_BATCH_ID` and
/// `SKED_BATCH_COUNTS` (the counts as JSON) of its `env`; for `http`, as `batch` in its JSON
/// body (an object, or none).
pub fn callback_payload(
    kind: &str,
    template: &serde_json::Value,
    id: BatchId,
    counts: &BTreeMap<TaskState, u64>,
) -> serde_json::Value {
    let batch = serde_json::json!({ "id": id, "counts": counts });
    let mut payload = match template {
        serde_json::Value::Object(o) => o.clone(),
        _ => serde_json::Map::new(),
    };
    match kind {
        crate::builtin::SHELL => {
            let env = payload
                .entry("env")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(env) = env.as_object_mut() {
                env.insert("SKED_BATCH_ID".into(), id.to_string().into());
                env.insert(
                    "SKED_BATCH_COUNTS".into(),
                    batch["counts"].to_string().into(),
                );
            }
        }
        crate::builtin::HTTP => {
            let body = payload
                .entry("body")
                .or_insert_with(|| serde_json::json!({}));
            if let Some(body) = body.as_object_mut() {
                body.insert("batch".into(), batch);
            }
        }
        _ => {
            payload.insert("batch".into(), batch);
        }
    }
    serde_json::Value::Object(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_are_checked_as_tasks_made_once() {
        let ok = NewBatch {
            name: Some("import".into()),
            on_success: Some(NewTask::new("done").payload(serde_json::json!({"to": "ops"}))),
            on_complete: Some(NewTask::new("report")),
        };
        assert!(ok.validate().is_ok());
        let with = |t: NewTask| NewBatch {
            on_success: Some(t),
            ..NewBatch::default()
        };
        let err = |b: NewBatch| b.validate().unwrap_err().message().to_string();
        assert_eq!(
            err(with(NewTask::new("k").max_attempts(0))),
            "on_success: max_attempts must be at least 1, got 0"
        );
        assert!(
            err(with(NewTask::new("k").payload(serde_json::json!([1]))))
                .contains("must be an object")
        );
        assert!(err(with(NewTask::new("k").unique_key("u"))).contains("cannot have a unique key"));
        assert!(err(with(NewTask::new("k").after([1]))).contains("cannot have depends_on"));
        let mut joined = NewTask::new("k");
        joined.batch = Some(3);
        assert!(err(with(joined)).contains("cannot have a batch"));
        let named = NewBatch {
            name: Some("has space".into()),
            ..NewBatch::default()
        };
        assert!(err(named).contains("whitespace"));
    }

    #[test]
    fn a_batch_is_read_from_an_object_only() {
        let b: NewBatch =
            serde_json::from_value(serde_json::json!({"name": "n", "on_complete": {"kind": "k"}}))
                .unwrap();
        assert_eq!(b.on_complete.unwrap().kind, "k");
        assert!(serde_json::from_value::<NewBatch>(serde_json::json!([null, null])).is_err());
        let typo = serde_json::from_value::<NewBatch>(serde_json::json!({"on_sucess": {}}));
        assert!(typo.unwrap_err().to_string().contains("on_sucess"));
    }

    #[test]
    fn a_callback_payload_gains_the_batch() {
        let counts = BTreeMap::from([(TaskState::Succeeded, 9), (TaskState::Dead, 1)]);
        let p = callback_payload("mail", &serde_json::json!({"to": "ops"}), 7, &counts);
        assert_eq!(
            p,
            serde_json::json!({"to": "ops", "batch": {"id": 7, "counts": {"succeeded": 9, "dead": 1}}})
        );
        let p = callback_payload("mail", &serde_json::Value::Null, 7, &BTreeMap::new());
        assert_eq!(p, serde_json::json!({"batch": {"id": 7, "counts": {}}}));
        // The built-in kinds take them where their payloads have room.
        let shell = serde_json::json!({"command": "notify"});
        let p = callback_payload("shell", &shell, 7, &counts);
        assert_eq!(
            p["env"],
            serde_json::json!({"SKED_BATCH_ID": "7", "SKED_BATCH_COUNTS": "{\"dead\":1,\"succeeded\":9}"})
        );
        assert!(crate::check_builtin_payload("shell", &p).is_ok());
        let http = serde_json::json!({"url": "https://example.org/hook", "method": "POST"});
        let p = callback_payload("http", &http, 7, &counts);
        assert_eq!(p["body"]["batch"]["id"], 7);
        assert!(crate::check_builtin_payload("http", &p).is_ok());
    }
}
