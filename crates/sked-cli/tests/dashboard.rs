//! The dashboard in real headless Chromium (driven by Playwright in tests/browser): schedules
//! and a failed task are shown, "Retry" is clicked and the task's state changes on screen, an
//! XSS payload is shown as text, a large payload is cut and shown whole on request.
//!
//! Needs `node`, `npm ci` in tests/browser and Chromium at /usr/bin/chromium (or $CHROMIUM):
//! `.ci/run` sets them up. Outside CI the test says what is missing and skips.
//! `SKED_SCREENSHOTS=DIR` keeps the screenshots (docs/dashboard.png is one).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Server, wait_for};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// What is missing to drive a browser, if anything.
fn missing() -> Option<String> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        return Some(format!("Chromium ({chromium}): apt-get install chromium"));
    }
    if !Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some("node".into());
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        return Some(format!(
            "playwright-core: npm ci --prefix {}",
            browser_dir().display()
        ));
    }
    None
}

#[test]
#[ignore = "slow tier"]
fn dashboard_in_chromium_shows_schedules_and_retries_a_failed_task() {
    if let Some(what) = missing() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the dashboard test needs {what} in CI (.ci/run installs it)"
        );
        eprintln!("skipping: missing {what}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--exec", "shell"]);
    let add = |kind: &str, payload: &str, extra: &[&str]| -> String {
        let mut args = vec!["task", "add", "--kind", kind, "--payload", payload];
        args.extend_from_slice(extra);
        server.ok(&args).trim().to_string()
    };
    server.ok(&[
        "schedule",
        "add",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--tz",
        "Europe/Berlin",
        "--dst",
        "twice",
        "--jitter",
        "5m",
        "--kind",
        "report",
    ]);
    server.ok(&[
        "schedule", "add", "hourly", "--every", "1h", "--kind", "report",
    ]);
    server.ok(&["schedule", "trigger", "nightly"]);
    let etl = dir.path().join("etl.yaml");
    std::fs::write(
        &etl,
        "name: etl\ntasks:\n- {name: extract, kind: shell, payload: {command: 'true'}}\n\
         - {name: load, kind: shell, payload: {command: 'true'}, after: [extract]}\n",
    )
    .unwrap();
    server.ok(&[
        "schedule",
        "add",
        "etl-daily",
        "--cron",
        "0 2 * * *",
        "--workflow",
        etl.to_str().unwrap(),
    ]);
    // Fails the first time with markup in its error, succeeds when run again.
    let marker = dir.path().join("ran-once");
    let cmd = format!(
        "test -f {m} || {{ touch {m}; echo '<b>boom</b>' >&2; exit 3; }}",
        m = marker.display()
    );
    let failed = add(
        "shell",
        &serde_json::json!({ "command": cmd }).to_string(),
        &["--max-attempts", "1"],
    );
    // Kind `web` has no executor here: these stay available.
    let xss = add(
        "web",
        r#"{"html":"<img src=x onerror=alert(1)><script>window.pwned=1</script>"}"#,
        &[],
    );
    let big = add(
        "web",
        &serde_json::json!({ "blob": "x".repeat(30_000) }).to_string(),
        &[],
    );
    wait_for("the failing task to die", Duration::from_secs(20), || {
        server.task(&failed)["state"] == "dead"
    });
    // A queue at its rate limit: one task started this hour, the other waits.
    server.ok(&["queue", "limit", "paced", "--rate", "1/h", "--create"]);
    server.ok(&[
        "queue",
        "limit",
        "tenants",
        "--per-key",
        "2",
        "--per-key-rate",
        "5/s",
        "--create",
    ]);
    // A queue in strict order per key: a dead task stops its key; the next one waits for it.
    server.ok(&[
        "queue",
        "limit",
        "ordered",
        "--per-key",
        "1",
        "--order",
        "strict",
        "--create",
    ]);
    let stops = add(
        "shell",
        &serde_json::json!({ "command": "exit 1" }).to_string(),
        &["--queue", "ordered", "--key", "k1", "--max-attempts", "1"],
    );
    wait_for("the ordered task to die", Duration::from_secs(20), || {
        server.task(&stops)["state"] == "dead"
    });
    let behind = add(
        "shell",
        &serde_json::json!({ "command": "true" }).to_string(),
        &["--queue", "ordered", "--key", "k1"],
    );
    let paced = serde_json::json!({ "command": "true" }).to_string();
    let first = add("shell", &paced, &["--queue", "paced"]);
    let waiting = add("shell", &paced, &["--queue", "paced"]);
    wait_for("the paced task to succeed", Duration::from_secs(20), || {
        server.task(&first)["state"] == "succeeded"
    });
    // Thirty tasks an hour off, of two tenants, for the search and the bulk actions.
    let later: Vec<serde_json::Value> = (0..30)
        .map(|i| {
            let key = if i < 10 { "tenant-a" } else { "tenant-b" };
            serde_json::json!({"kind": "report", "queue": "bulk", "key": key, "run_at": "2099-01-01T00:00:00Z"})
        })
        .collect();
    let (status, _) = common::http_call(
        &server.url,
        "POST",
        "/v1/tasks/batch",
        &[],
        &serde_json::json!({ "tasks": later }).to_string(),
    );
    assert_eq!(status, 201);

    // A workflow whose tasks no worker here runs: its first task is available, the rest wait.
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        "name: nightly-etl\ntasks:\n- {name: extract, kind: etl}\n\
         - {name: transform, kind: etl, after: [extract]}\n\
         - {name: load, kind: etl, after: [transform]}\n",
    )
    .unwrap();
    let workflow = server.ok(&["workflow", "add", "-f", flow.to_str().unwrap()]);
    let workflow = workflow.trim().to_string();
    // A batch of one task no worker here runs, open, with a callback.
    let batch = server.ok(&[
        "batch",
        "open",
        "--name",
        "nightly-import",
        "--on-complete-kind",
        "report",
    ]);
    let batch = batch.trim().to_string();
    let member = add("etl", "null", &["--batch", &batch]);

    let shots = std::env::var("SKED_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_path_buf());
    let out = Command::new("node")
        .arg(browser_dir().join("dashboard.mjs"))
        .args([&server.url, &failed, &xss, &big])
        .arg(&shots)
        .arg(&waiting)
        .arg(&workflow)
        .arg(&batch)
        .arg(&member)
        .args([&stops, &behind])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser run failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("is shown as succeeded"), "{stdout}");
    // The click went through the API: the task ran again, to success.
    let t = server.task(&failed);
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(t["attempts"].as_array().unwrap().len(), 2, "{t}");
    assert!(shots.join("dashboard.png").exists());
    // The bulk actions went through the API: tenant-b's twenty were cancelled, then deleted;
    // tenant-a's ten are as they were.
    let left = server.json(&["task", "ls", "--queue", "bulk", "--limit", "100"]);
    let left = left["tasks"].as_array().unwrap();
    assert_eq!(left.len(), 10, "{left:?}");
    assert!(left.iter().all(|t| t["state"] == "scheduled"));
    // The schedule made in the browser was deleted there too.
    let gone = server.sked(&["schedule", "get", "made-here"]);
    assert_eq!(gone.status.code(), Some(2));
}
