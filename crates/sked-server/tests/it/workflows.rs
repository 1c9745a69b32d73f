//! `/v1/workflows`: made all or none, read with counts and graph, waited for and cancelled;
//! bad input answered with 4xx and nothing made.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Api, api, assert_error};

/// No workflow and no task exists.
async fn nothing_made(a: &Api) {
    let (_, list) = a.call("GET", "/v1/workflows", None).await;
    assert_eq!(list["workflows"], json!([]), "{list}");
    let (_, tasks) = a.call("GET", "/v1/tasks", None).await;
    assert_eq!(tasks["tasks"], json!([]), "{tasks}");
}

#[tokio::test]
async fn a_workflow_is_made_read_and_cancelled() {
    let a = api(None);
    let body = json!({
        "name": "nightly",
        "tasks": [
            {"name": "load", "kind": "load", "after": ["t1", "t2"]},
            {"name": "extract", "kind": "extract", "payload": {"day": 1}},
            {"name": "t1", "kind": "transform", "after": ["extract"]},
            {"name": "t2", "kind": "transform", "after": ["extract"], "priority": 5}
        ]
    });
    let (s, made) = a
        .call("POST", "/v1/workflows", Some(&body.to_string()))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    let id = made["id"].as_i64().unwrap();
    let ids: Vec<i64> = ["extract", "t1", "t2", "load"]
        .iter()
        .map(|n| made["tasks"][n].as_i64().unwrap())
        .collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "made parents first: {made}"
    );

    let (s, w) = a.call("GET", &format!("/v1/workflows/{id}"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(w["name"], "nightly");
    assert_eq!(
        (
            w["state"].as_str(),
            w["done"].as_bool(),
            w["total"].as_u64()
        ),
        (Some("active"), Some(false), Some(4))
    );
    assert_eq!(w["counts"], json!({"available": 1, "waiting": 3}));

    let (_, t) = a.call("GET", &format!("/v1/tasks/{}", ids[2]), None).await;
    assert_eq!(t["workflow"], json!({"id": id, "name": "t2"}));
    assert_eq!(
        (t["state"].as_str(), t["priority"].as_i64()),
        (Some("waiting"), Some(5))
    );
    assert_eq!(t["waiting_for"], json!([ids[0]]));

    let (_, page) = a
        .call("GET", &format!("/v1/workflows/{id}/tasks?limit=2"), None)
        .await;
    let names: Vec<&str> = (page["tasks"].as_array().unwrap().iter())
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["extract", "t1"]);
    let after = page["next_after"].as_i64().unwrap();
    let (_, rest) = a
        .call(
            "GET",
            &format!("/v1/workflows/{id}/tasks?after={after}"),
            None,
        )
        .await;
    assert_eq!(rest["tasks"][1]["name"], "load");
    assert_eq!(rest["tasks"][1]["after"], json!(["t1", "t2"]));
    assert_eq!(rest["next_after"], Value::Null);

    let (_, listed) = a
        .call(
            "GET",
            &format!("/v1/tasks?workflow={id}&state=waiting"),
            None,
        )
        .await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 3);

    // A wait that passes answers with the workflow as it is.
    let (s, w) = a
        .call("GET", &format!("/v1/workflows/{id}?wait=50ms"), None)
        .await;
    assert_eq!((s, w["done"].as_bool()), (StatusCode::OK, Some(false)));

    let (s, w) = a
        .call("POST", &format!("/v1/workflows/{id}/cancel"), None)
        .await;
    assert_eq!(s, StatusCode::OK, "{w}");
    assert_eq!(
        (w["state"].as_str(), w["done"].as_bool()),
        (Some("cancelled"), Some(true))
    );
    assert_eq!(w["counts"], json!({"cancelled": 4}));
    let (_, w) = a
        .call("GET", &format!("/v1/workflows/{id}?wait=10s"), None)
        .await;
    assert_eq!(w["state"], "cancelled", "a done workflow answers at once");

    let (_, list) = a.call("GET", "/v1/workflows", None).await;
    assert_eq!(list["workflows"][0]["id"], id);
    assert_eq!(list["next_before"], Value::Null);
}

#[tokio::test]
async fn bad_workflows_are_refused_and_make_nothing() {
    let a = api(None);
    let cases = [
        (
            json!({"tasks": [{"name": "a", "kind": "k", "after": ["b"]}, {"name": "b", "kind": "k", "after": ["a"]}]}),
            "the workflow has a cycle: a → b → a",
        ),
        (
            json!({"tasks": [{"name": "a", "kind": "k", "after": ["nope"]}]}),
            "task \"a\" waits for \"nope\", which the workflow does not name",
        ),
        (
            json!({"tasks": [{"name": "a", "kind": "k"}, {"name": "a", "kind": "k"}]}),
            "names two tasks \"a\"",
        ),
        (
            json!({"tasks": [{"name": "a", "kind": "k"}, {"name": "b", "kind": "k", "depends_on": [987654]}]}),
            "987654",
        ),
        (json!({"tasks": []}), "at least one task"),
        (
            json!({"tasks": [{"name": "a", "kind": "k", "unique_key": "x"}]}),
            "cannot have a unique key",
        ),
        (
            json!({"tasks": [{"name": "a", "kind": "k", "max_attempts": 0}]}),
            "task \"a\": max_attempts must be at least 1",
        ),
    ];
    for (body, needle) in cases {
        let got = a
            .call("POST", "/v1/workflows", Some(&body.to_string()))
            .await;
        assert_error(
            got,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
        nothing_made(&a).await;
    }
    // A field no task has is named.
    let (s, e) = a
        .call(
            "POST",
            "/v1/workflows",
            Some(r#"{"tasks": [{"name": "a", "kind": "k", "paylod": 1}]}"#),
        )
        .await;
    assert!(s.is_client_error(), "{s} {e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("paylod") && msg.contains("task \"a\""),
        "{msg}"
    );
    nothing_made(&a).await;

    let got = a.call("GET", "/v1/workflows/12", None).await;
    assert_error(got, StatusCode::NOT_FOUND, "not_found", "workflow");
    let got = a.call("GET", "/v1/workflows/abc", None).await;
    assert_error(
        got,
        StatusCode::NOT_FOUND,
        "not_found",
        "workflow ids are integers",
    );
    let got = a.call("POST", "/v1/workflows/12/cancel", None).await;
    assert_error(got, StatusCode::NOT_FOUND, "not_found", "workflow");

    let (_, made) = a
        .call(
            "POST",
            "/v1/workflows",
            Some(r#"{"tasks": [{"name": "a", "kind": "k"}]}"#),
        )
        .await;
    let id = made["id"].as_i64().unwrap();
    let got = a
        .call("GET", &format!("/v1/workflows/{id}?wait=10h"), None)
        .await;
    assert_error(
        got,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "--max-wait",
    );
}

#[tokio::test]
async fn a_schedule_starts_a_workflow_and_bad_ones_make_nothing() {
    let a = api(None);
    let etl = json!({"name": "etl", "tasks": [
        {"name": "extract", "kind": "extract"},
        {"name": "load", "kind": "load", "after": ["extract"]}
    ]});
    let body = json!({"name": "nightly", "spec": "0 3 * * *", "workflow": etl});
    let (s, made) = a
        .call("POST", "/v1/schedules", Some(&body.to_string()))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{made}");
    // As given, with the defaults of the fields left out.
    let tasks = made["workflow"]["tasks"].as_array().unwrap();
    assert_eq!(
        (tasks[0]["kind"].as_str(), tasks[0].get("run_at")),
        (Some("extract"), None)
    );
    assert_eq!(
        (tasks[1]["max_attempts"].as_i64(), &tasks[1]["after"]),
        (Some(25), &json!(["extract"]))
    );
    assert!(made.get("task").is_none(), "{made}");
    let (_, got) = a.call("GET", "/v1/schedules/nightly", None).await;
    assert_eq!(got["workflow"]["tasks"][1]["after"], json!(["extract"]));
    // A run now: the workflow whole, the ledger naming its first task.
    let (s, run) = a
        .call("POST", "/v1/schedules/nightly/trigger", Some("{}"))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{run}");
    let (_, list) = a.call("GET", "/v1/workflows", None).await;
    let w = &list["workflows"][0];
    assert_eq!(
        (&w["schedule"], &w["total"]),
        (&json!("nightly"), &json!(2))
    );
    let (_, first) = a
        .call("GET", &format!("/v1/tasks/{}", run["id"]), None)
        .await;
    assert_eq!(first["kind"], "extract", "{run}");

    let task = json!({"kind": "k"});
    let bad = [
        (
            json!({"name": "b", "spec": "@daily", "task": task, "workflow": etl}),
            "not both",
        ),
        (json!({"name": "b", "spec": "@daily"}), "needs a task"),
        (
            json!({"name": "b", "spec": "@daily", "workflow": {"tasks": [{"name": "a", "kind": "k", "batch": 1}]}}),
            "cannot join a batch",
        ),
        (
            json!({"name": "b", "spec": "@daily", "workflow": {"tasks": [{"name": "a", "kind": "k", "after": ["a"]}]}}),
            "cycle",
        ),
    ];
    for (body, needle) in bad {
        let got = a
            .call("POST", "/v1/schedules", Some(&body.to_string()))
            .await;
        assert_error(
            got,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
        let (s, _) = a.call("GET", "/v1/schedules/b", None).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}
