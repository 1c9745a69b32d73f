//! `PUT /v1/schedules`: many schedules in one request, all or none, with groups, pruning and
//! dry runs.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{api, assert_error};

fn schedule(name: &str, spec: &str) -> Value {
    json!({"name": name, "spec": spec, "task": {"kind": "k"}})
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_group_is_written_pruned_and_tried_dry() {
    let a = api(None);
    let put = |body: Value| {
        let a = &a;
        async move {
            a.call("PUT", "/v1/schedules", Some(&body.to_string()))
                .await
        }
    };
    let set = json!([schedule("a", "every 1m"), schedule("b", "every 1h")]);
    let (s, r) = put(json!({"schedules": set, "group": "files"})).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(names(&r["created"]), ["a", "b"]);
    // Again: unchanged. Changed and shortened as a dry run: reported, nothing written.
    let (_, r) = put(json!({"schedules": set, "group": "files"})).await;
    assert_eq!(names(&r["unchanged"]), ["a", "b"]);
    let dry = json!({"schedules": [schedule("a", "every 2m"), schedule("c", "every 1m")],
                     "group": "files", "prune": true, "dry_run": true});
    let (_, r) = put(dry.clone()).await;
    assert_eq!(
        (
            names(&r["created"]),
            names(&r["updated"]),
            names(&r["removed"])
        ),
        (vec!["c"], vec!["a"], vec!["b"])
    );
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    let specs: Vec<(&str, &str)> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["spec"].as_str().unwrap()))
        .collect();
    assert_eq!(specs, [("a", "every 1m"), ("b", "every 1h")]);
    // For real.
    let mut real = dry;
    real["dry_run"] = json!(false);
    let (_, r) = put(real).await;
    assert_eq!(names(&r["removed"]), ["b"]);
    let (_, got) = a.call("GET", "/v1/schedules/a", None).await;
    assert_eq!(
        (got["spec"].as_str(), got["declared_by"].as_str()),
        (Some("every 2m"), Some("files"))
    );
    assert_error(
        a.call("GET", "/v1/schedules/b", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "b",
    );
}

#[tokio::test]
async fn one_bad_definition_refuses_all_and_each_is_named() {
    let a = api(None);
    let mut bad_field = schedule("d", "every 1m");
    bad_field["colour"] = json!("red");
    let body = json!({"schedules": [
        schedule("a", "every 1m"),
        schedule("b", "61 * * * *"),
        {"name": "c", "spec": "every 1m", "tz": "Mars/Olympus", "task": {"kind": "k"}},
        bad_field,
        schedule("a", "every 5m"),
    ]});
    let got = a
        .call("PUT", "/v1/schedules", Some(&body.to_string()))
        .await;
    for needle in [
        "4 invalid schedules",
        "schedule \"b\"",
        "schedule \"c\"",
        "schedule \"d\": unknown field `colour`",
        "schedule \"a\" is given twice",
    ] {
        assert_error(
            got.clone(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
    }
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"], json!([]));
    // Pruning needs a group; a group needs a valid name.
    let prune = json!({"schedules": [schedule("a", "every 1m")], "prune": true});
    assert_error(
        a.call("PUT", "/v1/schedules", Some(&prune.to_string()))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "needs a group",
    );
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"], json!([]));
}

#[tokio::test]
async fn a_bulk_body_may_be_larger_than_other_bodies() {
    let a = api(None);
    // About 3 MiB: more than any other request may carry.
    let many: Vec<Value> = (0..15_000)
        .map(|i| {
            let mut s = schedule(&format!("tenant-{i:05}-digest"), "0 9 * * *");
            s["tz"] = json!("Europe/Berlin");
            s["task"]["payload"] = json!({"tenant": i, "report": "daily-digest-of-everything"});
            s
        })
        .collect();
    let body = json!({"schedules": many}).to_string();
    assert!(body.len() > sked_server::MAX_BODY_BYTES, "{}", body.len());
    let (s, r) = a.call("PUT", "/v1/schedules", Some(&body)).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["created"].as_array().unwrap().len(), 15_000);
    // Elsewhere the limit stays.
    assert_error(
        a.call("POST", "/v1/schedules", Some(&body)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "larger than",
    );
}
