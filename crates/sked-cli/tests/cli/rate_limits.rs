//! Queue rate limits through the CLI and HTTP on SQLite: set (with a burst or without), kept
//! beside the concurrency limit, removed, refused when invalid (exit 2, 422, nothing changed), and enforced on
//! claims, with a waiting claim woken when the window lets a task start.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Server;
use crate::hostile_cli::request;

fn call(srv: &Server, method: &str, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = request(srv, method, path, &body.to_string());
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn queue(srv: &Server, name: &str) -> Value {
    let listed = srv.json(&["queue", "ls"]);
    listed["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn rate_limits_are_set_kept_and_removed_and_bad_ones_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let set = srv.json(&["queue", "limit", "mail", "--rate", "20/min", "--create"]);
    assert_eq!(set["rate"], "20/min", "{set}");
    assert_eq!(set["concurrency_limit"], Value::Null);
    // The concurrency limit beside it leaves the rate as it is.
    let both = srv.json(&["queue", "limit", "mail", "3"]);
    assert_eq!(
        (both["rate"].clone(), both["concurrency_limit"].clone()),
        (json!("20/min"), json!(3))
    );
    assert!(srv.ok(&["queue", "ls"]).contains("20/min"));

    for bad in [
        vec!["--rate", "0/s"],
        vec!["--rate", "ten/s"],
        vec!["--rate", "10/fortnight"],
        vec!["--concurrency", "-1"],
        vec!["--burst", "5"],
        vec!["--rate", "10/s", "--burst", "-1"],
        vec!["--rate", "10/s burst 2", "--burst", "5"],
        vec![],
    ] {
        let mut args = vec!["queue", "limit", "mail"];
        args.extend(&bad);
        let out = srv.sked(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(!stderr.trim().is_empty(), "{bad:?} says nothing");
    }
    let (status, body) = call(&srv, "PUT", "/v1/queues/mail/limit", json!({"rate": "0/s"}));
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at least 1"),
        "{body}"
    );
    for bad in [
        json!({}),
        json!({"burst": 5}),
        json!({"rate": null, "burst": 5}),
        json!({"rate": "10/s", "burst": 2_000_000}),
        json!({"rate": "10/s burst 2", "burst": 5}),
    ] {
        let (status, body) = call(&srv, "PUT", "/v1/queues/mail/limit", bad.clone());
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let kept = queue(&srv, "mail");
    assert_eq!(
        (kept["rate"].clone(), kept["concurrency_limit"].clone()),
        (json!("20/min"), json!(3))
    );

    // HTTP's older field name still sets the concurrency limit alone.
    let (status, body) = call(&srv, "PUT", "/v1/queues/mail/limit", json!({"limit": 4}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["rate"].clone(), body["concurrency_limit"].clone()),
        (json!("20/min"), json!(4))
    );
    // A burst goes with the rate, by flag or in the rate's text, and shows with it.
    let burst = srv.json(&["queue", "limit", "mail", "--rate", "10/s", "--burst", "5"]);
    assert_eq!(burst["rate"], "10/s burst 5", "{burst}");
    assert!(srv.ok(&["queue", "ls"]).contains("10/s burst 5"));
    let (status, body) = call(
        &srv,
        "PUT",
        "/v1/queues/mail/limit",
        json!({"rate": "20/min", "burst": 3}),
    );
    assert_eq!(
        (status, body["rate"].clone()),
        (200, json!("20/min burst 3"))
    );
    // A rate set again without one has none.
    let plain = srv.json(&["queue", "limit", "mail", "--rate", "20/min"]);
    assert_eq!(plain["rate"], "20/min", "{plain}");
    let removed = srv.json(&["queue", "limit", "mail", "--rate", "none"]);
    assert_eq!(removed["rate"], Value::Null, "{removed}");
    assert_eq!(removed["concurrency_limit"], 4);
}

#[test]
fn a_rate_limited_queue_starts_no_more_than_its_window_allows() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    srv.json(&["queue", "limit", "paced", "--rate", "4/2s", "--create"]);
    for _ in 0..10 {
        srv.ok(&["task", "add", "--kind", "k", "--queue", "paced"]);
    }
    let claim = |wait: &str| {
        let (status, body) = call(
            &srv,
            "POST",
            "/v1/claim",
            json!({"worker": "w", "queues": ["paced"], "max": 10, "wait": wait}),
        );
        assert_eq!(status, 200, "{body}");
        body["tasks"].as_array().unwrap().len()
    };
    let first = Instant::now();
    assert_eq!(claim("0s"), 4, "a window's worth");
    assert_eq!(claim("0s"), 0, "the window is full");
    // Lists and metrics say what holds the queue back, and the current rate.
    let paced = queue(&srv, "paced");
    assert_eq!(paced["rate_window"], 4, "{paced}");
    assert_eq!(paced["held"]["by"], "rate", "{paced}");
    assert!(paced["held"]["until"].is_string(), "{paced}");
    // And a task that waits says why.
    let waiting = srv.json(&["task", "ls", "--queue", "paced", "--state", "available"]);
    let id = waiting["tasks"][0]["id"].to_string();
    let shown = srv.ok(&["task", "get", &id]);
    assert!(shown.contains("held by queue paced: rate until"), "{shown}");
    let table = srv.ok(&["queue", "ls"]);
    assert!(
        table.contains("4 of 4/2s") && table.contains("rate until"),
        "{table}"
    );
    let (_, metrics) = crate::common::http_get(&srv.url, "/metrics").unwrap();
    for series in [
        "sked_queue_rate_limit{queue=\"paced\"} 4",
        "sked_queue_rate_period_seconds{queue=\"paced\"} 2",
        "sked_queue_rate_window_starts{queue=\"paced\"} 4",
        "sked_queue_held{by=\"rate\",queue=\"paced\"} 1",
    ] {
        assert!(metrics.contains(series), "no {series} in\n{metrics}");
    }
    // A waiting claim comes back when the first starts leave the window, not before.
    assert_eq!(claim("10s"), 4);
    let waited = first.elapsed();
    eprintln!("the second window's claim came {waited:?} after the first");
    assert!(
        waited >= Duration::from_millis(1990),
        "too early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "not woken: {waited:?}");
}

/// A quota of 20 a minute on SQLite: 20 of 21 tasks start at once, the 21st a minute after the
/// first, when they leave the window. Takes a minute.
#[test]
#[ignore = "slow tier"]
fn a_quota_of_twenty_a_minute_starts_the_twenty_first_a_minute_later() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &["--exec", "shell"]);
    srv.json(&["queue", "limit", "quota", "--rate", "20/min", "--create"]);
    crate::common::starts::enqueue(&srv, dir.path(), "quota", 21, "true");
    crate::common::wait_for("20 starts", Duration::from_secs(10), || {
        crate::common::starts::of_queue(&srv, "quota").len() >= 20
    });
    crate::common::wait_for("the 21st start", Duration::from_secs(75), || {
        crate::common::starts::of_queue(&srv, "quota").len() == 21
    });
    let starts = crate::common::starts::of_queue(&srv, "quota");
    let after = |i: usize| Duration::from_nanos((starts[i] - starts[0]) as u64);
    eprintln!(
        "20/min: the 20th started {:?} after the first, the 21st {:?} after it",
        after(19),
        after(20)
    );
    assert!(after(19) < Duration::from_secs(5), "{:?}", after(19));
    assert!(
        after(20) >= Duration::from_secs(60) && after(20) < Duration::from_secs(62),
        "{:?}",
        after(20)
    );
    assert_eq!(crate::common::starts::busiest(&starts, 60_000_000_000), 20);
}
