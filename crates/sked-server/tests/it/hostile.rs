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
