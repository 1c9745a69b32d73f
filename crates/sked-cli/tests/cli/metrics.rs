//! `/metrics` of a real server passes the Prometheus reference parser (Python
//! `prometheus_client`) and the producer-side checks in support/check_metrics.py, and its
//! numbers say what happened: successes, a dead task, a retry, claims, latencies, schedule
//! occurrences, leadership.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Server, http_get, wait_for};
use serde_json::Value;

/// `python3` with `prometheus_client`, or `None` to skip outside CI (CI installs it).
fn python_with_parser() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with prometheus_client is needed in CI (.ci/run installs it)"
        );
        eprintln!("skipping: python3 -c 'import prometheus_client' failed");
        return None;
    }
    Some("python3")
}

/// Runs the checker on `text`: the samples, or the checker's complaint as a panic.
fn parse(py: &str, text: &str) -> Vec<Value> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/check_metrics.py"
    );
    let mut child = Command::new(py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}\n--- the exposition:\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The value of the sample named `name` whose labels include `labels`.
fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][k] == *v))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))["value"]
        .as_f64()
        .unwrap()
}

#[test]
fn metrics_pass_the_prometheus_parser_and_count_what_happened() {
    let Some(py) = python_with_parser() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--exec", "shell"]);
    let add = |cmd: &str, extra: &[&str]| {
        let payload = serde_json::json!({ "command": cmd }).to_string();
        let mut args = vec!["task", "add", "--kind", "shell", "--payload", &payload];
        args.extend_from_slice(extra);
        server.ok(&args).trim().to_string()
    };
    let ok: Vec<String> = (0..3).map(|_| add("true", &[])).collect();
    let dead = add("exit 1", &["--max-attempts", "1", "--queue", "fragile"]);
    server.ok(&[
        "schedule",
        "add",
        "tick",
        "--every",
        "1s",
        "--kind",
        "shell",
        "--payload",
        r#"{"command":"true"}"#,
    ]);
    wait_for("the tasks to end", Duration::from_secs(20), || {
        ok.iter().all(|id| server.task(id)["state"] == "succeeded")
            && server.task(&dead)["state"] == "dead"
    });
    wait_for("a schedule occurrence", Duration::from_secs(20), || {
        !server.json(&["schedule", "get", "tick"])["last_finished_at"].is_null()
    });
    // A label value that needs escaping in the text format.
    add("true", &["--queue", "q-with_odd.name", "--in", "1h"]);

    let (status, text) = http_get(&server.url, "/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    let samples = parse(py, &text);

    assert!(
        value(
            &samples,
            "sked_finished_total",
            &[("queue", "default"), ("outcome", "succeeded")]
        ) >= 3.0
    );
    assert_eq!(
        value(
            &samples,
            "sked_finished_total",
            &[("queue", "fragile"), ("outcome", "dead")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "sked_tasks",
            &[("queue", "fragile"), ("state", "dead")]
        ),
        1.0
    );
    // Every state of a queue is there, zeros included.
    assert_eq!(
        value(
            &samples,
            "sked_tasks",
            &[("queue", "fragile"), ("state", "running")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "sked_tasks",
            &[("queue", "q-with_odd.name"), ("state", "scheduled")]
        ),
        1.0
    );
    assert!(value(&samples, "sked_claimed_total", &[("queue", "default")]) >= 3.0);
    assert_eq!(
        value(&samples, "sked_enqueued_total", &[("queue", "fragile")]),
        1.0
    );
    assert!(
        value(
            &samples,
            "sked_enqueue_to_start_seconds_count",
            &[("queue", "default")]
        ) >= 3.0
    );
    assert!(
        value(
            &samples,
            "sked_due_to_start_seconds_count",
            &[("queue", "default")]
        ) >= 3.0
    );
    assert!(value(&samples, "sked_run_seconds_count", &[("queue", "fragile")]) == 1.0);
    assert!(
        value(
            &samples,
            "sked_schedule_occurrences_total",
            &[("outcome", "enqueued")]
        ) >= 1.0
    );
    assert_eq!(
        value(&samples, "sked_leader", &[]),
        1.0,
        "a lone server leads"
    );
    assert_eq!(value(&samples, "sked_rescued_total", &[]), 0.0);
}
