//! Writing many schedules at once: the body of `PUT /v1/schedules`, and the check that names
//! every bad definition in it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sked_core::ScheduleDef;

/// `PUT /v1/schedules`: many schedules written in one transaction, all or none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SchedulesApply {
    /// The definitions, each as `POST /v1/schedules` takes one.
    pub schedules: Vec<ScheduleDef>,
    /// The group they belong to: each joins it, and one that exists keeps its paused flag (an
    /// operator's pause survives the next apply). Without a group, each is written as a
    /// `PUT /v1/schedules/{name}` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Name>))]
    pub group: Option<String>,
    /// Deletes the group's schedules that are not in `schedules` (their tasks stay).
    #[serde(default)]
    pub prune: bool,
    /// Changes nothing: the answer says what would change.
    #[serde(default)]
    pub dry_run: bool,
}

/// The most bad definitions an error names one by one.
const NAMED_MAX: usize = 20;

/// Reads schedule definitions from JSON values and checks them together: each well formed and
/// valid, no name twice. The error names every bad one (the first [`NAMED_MAX`], then how many
/// more), by name where it has one, else by position.
pub fn schedule_defs(values: Vec<Value>) -> Result<Vec<ScheduleDef>, String> {
    let mut defs = Vec::with_capacity(values.len());
    let mut bad = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        let label = match v.get("name").and_then(Value::as_str) {
            Some(n) => format!("schedule {n:?}"),
            None => format!("schedule #{}", i + 1),
        };
        match serde_json::from_value::<ScheduleDef>(v) {
            Ok(d) => defs.push(d),
            Err(e) => bad.push(format!("{label}: {e}")),
        }
    }
    bad.extend(check_defs(&defs));
    match bad.is_empty() {
        true => Ok(defs),
        false => Err(describe(bad)),
    }
}

/// Each problem of definitions written together: an invalid one, a name given twice.
pub fn check_defs(defs: &[ScheduleDef]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut seen = std::collections::HashSet::with_capacity(defs.len());
    for d in defs {
        if let Err(e) = d.validate() {
            bad.push(format!("schedule {:?}: {}", d.name, e.message()));
        }
        if !seen.insert(d.name.as_str()) {
            bad.push(format!("schedule {:?} is given twice", d.name));
        }
    }
    bad
}

/// One message for problems found together: how many, then each.
pub fn describe(bad: Vec<String>) -> String {
    let n = bad.len();
    let mut msg = match n {
        1 => "1 invalid schedule, nothing was changed: ".to_string(),
        _ => format!("{n} invalid schedules, nothing was changed: "),
    };
    msg.push_str(&bad[..n.min(NAMED_MAX)].join("; "));
    if n > NAMED_MAX {
        msg.push_str(&format!("; and {} more", n - NAMED_MAX));
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_bad_definition_is_named() {
        let ok = json!({"name": "a", "spec": "every 10s", "task": {"kind": "k"}});
        let values = vec![
            ok.clone(),
            json!({"name": "b", "spec": "61 * * * *", "task": {"kind": "k"}}),
            json!({"name": "c", "spec": "every 10s", "tz": "Mars/Olympus", "task": {"kind": "k"}}),
            json!({"name": "d", "spec": "every 10s", "task": {"kind": "k"}, "colour": "red"}),
            json!({"spec": "every 10s"}),
            ok,
        ];
        let e = schedule_defs(values).unwrap_err();
        assert!(
            e.starts_with("5 invalid schedules, nothing was changed: "),
            "{e}"
        );
        for part in [
            "schedule \"b\": ",
            "schedule \"c\": ",
            "schedule \"d\": unknown field `colour`",
            "schedule #5: ",
            "schedule \"a\" is given twice",
        ] {
            assert!(e.contains(part), "{part} in {e}");
        }
    }

    #[test]
    fn good_definitions_are_read_in_order() {
        let values = (0..3)
            .map(|i| json!({"name": format!("s{i}"), "spec": "every 1m", "task": {"kind": "k"}}))
            .collect();
        let defs = schedule_defs(values).unwrap();
        let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["s0", "s1", "s2"]);
    }

    #[test]
    fn a_long_list_of_problems_is_cut() {
        let bad: Vec<String> = (0..25).map(|i| format!("p{i}")).collect();
        let msg = describe(bad);
        assert!(msg.ends_with("p19; and 5 more"), "{msg}");
        assert!(msg.starts_with("25 invalid schedules"));
    }
}
