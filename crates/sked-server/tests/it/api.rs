//! The HTTP API in-process (no socket): contracts, and bad input answered with 4xx JSON errors
//! that change nothing.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::support::{api, assert_error};

#[tokio::test]
async fn enqueue_get_list_cancel() {
    let a = api(None);
    let (s, ins) = a
        .call(
            "POST",
            "/v1/tasks",
            Some(r#"{"kind": "email", "payload": {"to": "x"}, "priority": 3}"#),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    let id = ins["id"].as_i64().unwrap();
    assert_eq!(ins["state"], "available");
    let (s, t) = a.call("GET", &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (
            t["kind"].as_str(),
            t["priority"].as_i64(),
            t["queue"].as_str()
        ),
        (Some("email"), Some(3), Some("default"))
    );
    assert_eq!(t["payload"], json!({"to": "x"}));
    let (_, list) = a
        .call("GET", "/v1/tasks?state=available&kind=email", None)
        .await;
    assert_eq!(list["tasks"].as_array().unwrap().len(), 1);
    let (s, c) = a
        .call("POST", &format!("/v1/tasks/{id}/cancel"), None)
        .await;
    assert_eq!(
        (s, c["state"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    assert_error(
        a.call("POST", &format!("/v1/tasks/{id}/cancel"), None)
            .await,
        StatusCode::CONFLICT,
        "conflict",
        "cannot cancel",
    );
}

#[tokio::test]
async fn queue_counts_stop_at_the_limit_asked_for() {
    let a = api(None);
    for _ in 0..3 {
        a.call("POST", "/v1/tasks", Some(r#"{"kind": "k", "queue": "q"}"#))
            .await;
    }
    let (s, v) = a.call("GET", "/v1/queues", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["queues"][0]["counts"], json!({"available": 3}));
    assert!(v["queues"][0].get("counts_at_least").is_none(), "{v}");
    let (s, v) = a.call("GET", "/v1/queues?count_limit=2", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["queues"][0]["counts"], json!({"available": 2}));
    assert_eq!(v["queues"][0]["counts_at_least"], json!(["available"]));
    for bad in ["0", "10000001"] {
        assert_error(
            a.call("GET", &format!("/v1/queues?count_limit={bad}"), None)
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "count_limit",
        );
    }
    let (s, v) = a.call("GET", "/v1/queues?count_limit=lots", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("count_limit"),
        "{v}"
    );
}

#[tokio::test]
async fn unique_key_returns_the_same_task() {
    let a = api(None);
    let body = r#"{"kind": "k", "unique_key": "once"}"#;
    let (s1, first) = a.call("POST", "/v1/tasks", Some(body)).await;
    let (s2, second) = a.call("POST", "/v1/tasks", Some(body)).await;
    assert_eq!((s1, s2), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(first["id"], second["id"]);
    assert_eq!(second["duplicate"], true);
}

#[tokio::test]
async fn worker_protocol_round_trip_and_stale_attempt() {
    let a = api(None);
    let (_, ins) = a.call("POST", "/v1/tasks", Some(r#"{"kind": "k"}"#)).await;
    let id = ins["id"].as_i64().unwrap();
    let (s, claimed) = a
        .call(
            "POST",
            "/v1/claim",
            Some(r#"{"worker": "py-1", "max": 10, "wait": "100ms"}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let task = &claimed["tasks"][0];
    assert_eq!(
        (task["id"].as_i64(), task["attempt"].as_i64()),
        (Some(id), Some(1))
    );
    let (s, hb) = a
        .call(
            "POST",
            &format!("/v1/tasks/{id}/heartbeat"),
            Some(r#"{"attempt": 1}"#),
        )
        .await;
    assert_eq!(
        (s, hb["cancel_requested"].as_bool()),
        (StatusCode::OK, Some(false))
    );
    // A heartbeat may carry progress; the task shows the latest. A bad one is a 422 and
    // changes nothing.
    let (s, _) = a
        .call(
            "POST",
            &format!("/v1/tasks/{id}/heartbeat"),
            Some(r#"{"attempt": 1, "progress": 25}"#),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = a
        .call(
            "POST",
            "/v1/heartbeat",
            Some(&format!(
                r#"{{"tasks": [{{"id": {id}, "attempt": 1, "progress": {{"percent": 50, "step": "b"}}}}]}}"#
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, t) = a.call("GET", &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(t["progress"], json!({"percent": 50, "step": "b"}));
    let big = "x".repeat(5000);
    for body in [
        r#"{"attempt": 1, "progress": 101}"#.to_string(),
        r#"{"attempt": 1, "progress": "half"}"#.to_string(),
        format!(r#"{{"attempt": 1, "progress": {{"log": "{big}"}}}}"#),
    ] {
        assert_error(
            a.call("POST", &format!("/v1/tasks/{id}/heartbeat"), Some(&body))
                .await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_input",
            "progress",
        );
    }
    assert_error(
        a.call(
            "POST",
            "/v1/heartbeat",
            Some(&format!(
                r#"{{"tasks": [{{"id": {id}, "attempt": 1, "progress": -5}}]}}"#
            )),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        &format!("task {id}: progress"),
    );
    let (_, t) = a.call("GET", &format!("/v1/tasks/{id}"), None).await;
    assert_eq!(
        t["progress"],
        json!({"percent": 50, "step": "b"}),
        "unchanged"
    );
    assert_error(
        a.call(
            "POST",
            &format!("/v1/tasks/{id}/complete"),
            Some(r#"{"attempt": 2}"#),
        )
        .await,
        StatusCode::CONFLICT,
        "stale_lease",
        "no longer held",
    );
    let (s, done) = a
        .call(
            "POST",
            &format!("/v1/tasks/{id}/complete"),
            Some(r#"{"attempt": 1, "result": {"n": 1}}"#),
        )
        .await;
    assert_eq!(
        (s, done["state"].as_str()),
        (StatusCode::OK, Some("succeeded"))
    );
    // An empty long-poll returns empty after its wait.
    let (_, none) = a
        .call(
            "POST",
            "/v1/claim",
            Some(r#"{"worker": "py-1", "wait": "50ms"}"#),
        )
        .await;
    assert_eq!(none["tasks"], json!([]));
}

#[tokio::test]
async fn schedules_and_cron_next() {
    let a = api(None);
    let body = r#"{"name": "nightly", "spec": "30 2 * * *", "tz": "Europe/Berlin", "task": {"kind": "shell", "payload": {"command": "true"}}}"#;
    let (s, sched) = a.call("POST", "/v1/schedules", Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{sched}");
    assert_eq!(sched["overlap"], "skip");
    assert!(sched["next_fire_at"].is_string());
    let (_, list) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1);
    let (s, _) = a.call("POST", "/v1/schedules/nightly/trigger", None).await;
    assert_eq!(s, StatusCode::CREATED);
    let (_, occ) = a
        .call("GET", "/v1/schedules/nightly/occurrences", None)
        .await;
    assert_eq!(occ["occurrences"][0]["outcome"], "enqueued");
    let (s, next) = a
        .call(
            "GET",
            "/v1/cron/next?expr=30%202%20*%20*%20*&tz=Europe/Berlin&after=2026-03-28T12:00:00Z&n=2",
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        next["times"],
        json!(["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"])
    );
    let (s, _) = a.call("DELETE", "/v1/schedules/nightly", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    assert_error(
        a.call("GET", "/v1/schedules/nightly", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "nightly",
    );
}

#[tokio::test]
async fn bad_input_is_a_4xx_json_error_and_changes_nothing() {
    let a = api(None);
    let sched = |spec: &str, tz: &str| {
        format!(r#"{{"name": "s", "spec": "{spec}", "tz": "{tz}", "task": {{"kind": "k"}}}}"#)
    };
    assert_error(
        a.call("POST", "/v1/schedules", Some(&sched("61 * * * *", "UTC")))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "minute value 61",
    );
    assert_error(
        a.call("POST", "/v1/schedules", Some(&sched("0 0 30 2 *", "UTC")))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "can never fire",
    );
    assert_error(
        a.call("POST", "/v1/schedules", Some(&sched("@daily", "Mars/Base")))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "unknown time zone",
    );
    assert_eq!(
        a.call("GET", "/v1/schedules", None).await.1["schedules"],
        json!([])
    );

    assert_error(
        a.call("POST", "/v1/tasks", Some(r#"{"kind": "k""#)).await,
        StatusCode::BAD_REQUEST,
        "invalid_json",
        "malformed JSON",
    );
    assert_error(
        a.call("POST", "/v1/tasks", Some(r#"{"kind": "k", "colour": 1}"#))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "colour",
    );
    assert_error(
        a.call(
            "POST",
            "/v1/tasks",
            Some(r#"{"kind": "k", "max_attempts": 0}"#),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "max_attempts",
    );
    assert_error(
        a.call(
            "POST",
            "/v1/tasks",
            Some(r#"{"kind": "k", "timeout": "soon"}"#),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "invalid duration",
    );
    assert_error(
        a.call("POST", "/v1/tasks", Some(r#"[1, 2]"#)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "invalid request body",
    );
    let big = format!(
        r#"{{"kind": "k", "payload": "{}"}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    assert_error(
        a.call("POST", "/v1/tasks", Some(&big)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "larger than",
    );
    let batch = r#"{"tasks": [{"kind": "ok"}, {"kind": "bad", "max_attempts": -1}]}"#;
    assert_error(
        a.call("POST", "/v1/tasks/batch", Some(batch)).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "task 1",
    );
    assert_eq!(a.task_count().await, 0, "nothing was enqueued");

    assert_error(
        a.call("GET", "/v1/tasks/12345", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "task 12345 not found",
    );
    assert_error(
        a.call("GET", "/v1/tasks/abc", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "task abc not found",
    );
    assert_error(
        a.call("POST", "/v1/tasks/12345/retry", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "12345",
    );
    assert_error(
        a.call("GET", "/v1/tasks?state=done", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "unknown task state",
    );
    assert_error(
        a.call("GET", "/v1/tasks?limit=lots", None).await,
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "invalid query",
    );
    assert_error(
        a.call("GET", "/v1/nothing", None).await,
        StatusCode::NOT_FOUND,
        "not_found",
        "no such endpoint",
    );
    assert_error(
        a.call("GET", "/v1/cron/next?expr=bad", None).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "fields",
    );
    assert_error(
        a.call("POST", "/v1/claim", Some(r#"{"worker": "w", "max": 0}"#))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_input",
        "max",
    );
}

#[tokio::test]
async fn token_is_required_when_configured() {
    let a = api(Some("s3cret"));
    assert_error(
        a.call("GET", "/v1/tasks", None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "token",
    );
    assert_error(
        a.call_with("GET", "/v1/tasks", None, Some("wrong")).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "token",
    );
    assert_eq!(
        a.call_with("GET", "/v1/tasks", None, Some("s3cret"))
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        a.call("GET", "/healthz", None).await.0,
        StatusCode::OK,
        "health checks need no token"
    );
}

/// A long-poll asking to wait an hour answers empty once the server's `max_wait` has passed.
#[tokio::test]
async fn a_long_poll_waits_at_most_the_servers_max_wait() {
    let a = crate::support::api_with(|s| sked_server::AppState {
        max_wait: std::time::Duration::from_millis(50),
        ..s
    });
    let claim = a.call(
        "POST",
        "/v1/claim",
        Some(r#"{"worker": "w", "wait": "1h"}"#),
    );
    let (s, v) = tokio::time::timeout(std::time::Duration::from_secs(30), claim)
        .await
        .expect("the claim answers");
    assert_eq!(
        (s, v["tasks"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0))
    );
    let work = a.call("GET", "/v1/work?after=1000000&wait=1h", None);
    let (s, v) = tokio::time::timeout(std::time::Duration::from_secs(30), work)
        .await
        .expect("the wait for work answers");
    assert_eq!(s, StatusCode::OK);
    assert!(v["epoch"].is_u64());
}

/// Random and mangled bodies, paths and queries: every answer is a JSON response below 500.
#[tokio::test]
async fn no_input_makes_the_server_answer_500() {
    let a = api(None);
    let (_, ins) = a.call("POST", "/v1/tasks", Some(r#"{"kind": "k"}"#)).await;
    let id = ins["id"].as_i64().unwrap();
    // Each endpoint with a valid body; the fuzzing sets some of its fields to odd values.
    let targets: Vec<(&str, String, Value)> = vec![
        (
            "POST",
            "/v1/tasks".into(),
            json!({"kind": "k", "queue": "q", "payload": {}, "priority": 1, "max_attempts": 2, "timeout": "1s", "unique_key": "u", "run_at": "2030-01-01T00:00:00Z"}),
        ),
        (
            "POST",
            "/v1/tasks/batch".into(),
            json!({"tasks": [{"kind": "k"}]}),
        ),
        (
            "POST",
            "/v1/claim".into(),
            json!({"worker": "w", "max": 2, "wait": "1ms", "lease_ttl": "5s", "queues": ["q"], "kinds": ["k"]}),
        ),
        (
            "POST",
            "/v1/schedules".into(),
            json!({"name": "s", "spec": "* * * * *", "tz": "UTC", "task": {"kind": "k"}, "overlap": "skip", "catchup": "all", "catchup_window": "1h", "paused": false}),
        ),
        (
            "PUT",
            "/v1/schedules/x".into(),
            json!({"spec": "every 5s", "task": {"kind": "k"}}),
        ),
        ("PUT", "/v1/queues/q/limit".into(), json!({"limit": 3})),
        (
            "POST",
            format!("/v1/tasks/{id}/heartbeat"),
            json!({"attempt": 1, "lease_ttl": "5s"}),
        ),
        (
            "POST",
            format!("/v1/tasks/{id}/complete"),
            json!({"attempt": 1, "result": 1}),
        ),
        (
            "POST",
            format!("/v1/tasks/{id}/fail"),
            json!({"attempt": 1, "error": "e", "retryable": true}),
        ),
        (
            "POST",
            format!("/v1/tasks/{id}/snooze"),
            json!({"attempt": 1, "delay": "1s"}),
        ),
        (
            "POST",
            format!("/v1/tasks/{id}/reschedule"),
            json!({"run_at": "+1s"}),
        ),
    ];
    let values: Vec<Value> = [
        "null",
        "true",
        "-1",
        "0",
        "2147483648",
        "9223372036854775807",
        "1e300",
        "\"\"",
        "\"x\"",
        "\"every 0s\"",
        "\"61 * * * *\"",
        "\"* * * * * * *\"",
        "\"@reboot\"",
        "\"Mars/Base\"",
        "\"-5s\"",
        "\"99999999999999h\"",
        "[]",
        "{}",
        "[1,{\"a\":[]}]",
        "\"\\u0000\"",
        "\"9999-12-31T23:59:59Z\"",
        "\"+99999999999d\"",
        "\"0 0 L * 5L\"",
        "\"1#5\"",
    ]
    .iter()
    .map(|v| serde_json::from_str(v).unwrap())
    .collect();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut statuses = std::collections::BTreeMap::new();
    for _ in 0..600 {
        let (method, path, template) = &targets[rng.usize(..targets.len())];
        let mut body = template.clone();
        let keys: Vec<String> = body.as_object().unwrap().keys().cloned().collect();
        for _ in 0..rng.usize(0..3) {
            let key = &keys[rng.usize(..keys.len())];
            body[key] = values[rng.usize(..values.len())].clone();
        }
        let mut text = body.to_string();
        if rng.u8(..10) == 0 {
            text.truncate(rng.usize(0..=text.len()));
        }
        let (status, json) = a.call(method, path, Some(&text)).await;
        assert!(
            status.as_u16() < 500,
            "{method} {path} {text} -> {status} {json}"
        );
        *statuses.entry(status.as_u16() / 100).or_insert(0) += 1;
    }
    // The fuzzing reached both the accepting and the refusing paths.
    assert!(statuses.get(&2).copied().unwrap_or(0) > 50, "{statuses:?}");
    assert!(statuses.get(&4).copied().unwrap_or(0) > 50, "{statuses:?}");
    for path in [
        "/v1/tasks/-1",
        "/v1/tasks/99999999999999999999",
        "/v1/tasks/%00",
        "/v1/schedules/%2F..%2F",
        "/v1/tasks?limit=-1",
        "/v1/tasks?before=x",
        "/v1/cron/next?expr=*&n=0",
        "/v1/cron/next?expr=*%20*%20*%20*%20*&after=yesterday",
    ] {
        let (status, _) = a.call("GET", path, None).await;
        assert!(status.as_u16() < 500, "GET {path} -> {status}");
    }
}
