//! Hostile input over the HTTP API: each case is a finding reproduced, answered with a 4xx JSON
//! error that names the problem and changes nothing.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{api, assert_error};

/// A duration past what any column holds was stored wrapped (as `-15h30m8s`): every duration is
/// bounded, in tasks and in schedules alike.
#[tokio::test]
async fn durations_beyond_the_limit_are_refused() {
    let a = api(None);
    let huge = "106751991167300d";
    for body in [
        format!(r#"{{"kind": "k", "timeout": "{huge}"}}"#),
        r#"{"kind": "k", "timeout": "3651d"}"#.to_string(),
        format!(r#"{{"kind": "k", "backoff": {{"base": "1s", "max": "{huge}"}}}}"#),
        format!(r#"{{"kind": "k", "backoff": {{"base": "{huge}", "max": "{huge}"}}}}"#),
    ] {
        assert_error(
            a.call("POST", "/v1/tasks", Some(&body)).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "longer than",
        );
    }
    assert_eq!(a.task_count().await, 0);
    let schedule = format!(
        r#"{{"name": "s", "spec": "* * * * *", "task": {{"kind": "k"}}, "catchup": "all", "catchup_window": "{huge}"}}"#
    );
    assert_error(
        a.call("POST", "/v1/schedules", Some(&schedule)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "longer than",
    );
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"], serde_json::json!([]));
    // The limit itself is accepted and reads back as given.
    let (s, t) = a
        .call(
            "POST",
            "/v1/tasks",
            Some(r#"{"kind": "k", "timeout": "3650d"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{t}");
    let (_, got) = a.call("GET", &format!("/v1/tasks/{}", t["id"]), None).await;
    assert_eq!(got["timeout"], "3650d");
}

/// A cron step past its field's range fired every second; a cron of 300,000 list items was
/// accepted.
#[tokio::test]
async fn cron_steps_and_sizes_are_bounded() {
    let a = api(None);
    let long = vec!["1"; 300_000].join(",");
    for (spec, needle) in [
        ("59/4294967295 * * * * *", "expected 1 to 59"),
        (long.as_str(), "the limit is 1024"),
    ] {
        let body = serde_json::json!({"name": "s", "spec": spec, "task": {"kind": "k"}});
        assert_error(
            a.call("POST", "/v1/schedules", Some(&body.to_string()))
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
    }
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"], serde_json::json!([]));
}

/// A claim naming 32,766 queues answered 500 ("too many SQL variables"); names went unchecked.
#[tokio::test]
async fn a_claim_names_few_and_valid_queues_and_kinds() {
    let a = api(None);
    let many: Vec<String> = (0..32_766).map(|i| format!("q{i}")).collect();
    for (body, needle) in [
        (json!({"worker": "w", "queues": many}), "at most 100"),
        (json!({"worker": "w", "kinds": many}), "at most 100"),
        (
            json!({"worker": "w", "queues": ["a b"]}),
            "queue \"a b\" contains",
        ),
        (
            json!({"worker": "w", "kinds": [""]}),
            "kind must be 1 to 128",
        ),
        (json!({"worker": ""}), "worker must be 1 to 128"),
    ] {
        assert_error(
            a.call("POST", "/v1/claim", Some(&body.to_string())).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
    }
    let hundred: Vec<String> = (0..100).map(|i| format!("q{i}")).collect();
    let (s, got) = a
        .call(
            "POST",
            "/v1/claim",
            Some(&json!({"worker": "w", "queues": hundred}).to_string()),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{got}");
}

/// Every array in a request has a bound, refused past it with 422 and nothing done: tasks
/// of a batch, queues of a worker's beat (heartbeats and
/// endings are bounded alike; claims by `a_claim_names_few_and_valid_queues_and_kinds`).
#[tokio::test]
async fn request_arrays_are_bounded() {
    let a = api(None);
    let tasks: Vec<_> = (0..10_001).map(|_| json!({"kind": "k"})).collect();
    let schedule =
        |i: usize| json!({"name": format!("s{i}"), "spec": "every 1h", "task": {"kind": "k"}});
    // A write of many schedules is bounded by its body's size; one bad definition refuses all.
    let mut schedules: Vec<_> = (0..1_001).map(schedule).collect();
    schedules[1_000]["spec"] = json!("61 * * * *");
    let queues: Vec<String> = (0..101).map(|i| format!("q{i}")).collect();
    let held: Vec<_> = (0..10_001)
        .map(|i| json!({"id": i, "attempt": 1}))
        .collect();
    for (method, path, body, needle) in [
        (
            "POST",
            "/v1/tasks/batch",
            json!({"tasks": tasks}),
            "at most 10000 tasks per batch",
        ),
        (
            "PUT",
            "/v1/schedules",
            json!({"schedules": schedules}),
            "1 invalid schedule, nothing was changed: schedule \"s1000\"",
        ),
        (
            "PUT",
            "/v1/workers/w",
            json!({"queues": queues}),
            "at most 100 queues",
        ),
        (
            "POST",
            "/v1/heartbeat",
            json!({"tasks": held}),
            "at most 10000 tasks",
        ),
    ] {
        assert_error(
            a.call(method, path, Some(&body.to_string())).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            needle,
        );
    }
    let (s, got) = a.call("GET", "/v1/tasks", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["tasks"], json!([]), "a refused batch enqueued nothing");
    let (s, got) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["schedules"], json!([]));
    // At the bound, taken.
    let tasks: Vec<_> = (0..10_000).map(|_| json!({"kind": "k"})).collect();
    let (s, got) = a
        .call(
            "POST",
            "/v1/tasks/batch",
            Some(&json!({"tasks": tasks}).to_string()),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{got}");
}

/// Names and unique keys are bounded in characters, as the OpenAPI document says (not bytes).
#[tokio::test]
async fn name_lengths_count_characters() {
    let a = api(None);
    let name = "é".repeat(128);
    let key = "é".repeat(512);
    let body = json!({"kind": name, "queue": name, "unique_key": key});
    let (s, got) = a.call("POST", "/v1/tasks", Some(&body.to_string())).await;
    assert_eq!(s, StatusCode::CREATED, "{got}");
    let body = json!({"kind": "é".repeat(129)});
    assert_error(
        a.call("POST", "/v1/tasks", Some(&body.to_string())).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "kind must be 1 to 128 characters",
    );
}
