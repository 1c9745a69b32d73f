//! `sked schedule apply -f FILE` through the real binary on SQLite: a YAML file written as a
//! group, tried with `--dry-run`, pruned, and a bad file refused whole (exit 2, each bad
//! definition named); `schedule ls` by prefix, a page at a time.

use std::process::Command;

use crate::common::{SKED, Server};

const FILE: &str = "\
# Each tenant's digest, and a cleanup.
- name: digest-acme
  spec: '0 9 * * *'
  tz: Europe/Berlin
  task: {kind: digest, payload: {tenant: acme}}
- name: cleanup
  spec: every 1h
  task: {kind: cleanup}
";

const CHANGED: &str = "\
- name: digest-acme
  spec: '0 8 * * *'
  tz: Europe/Berlin
  task: {kind: digest, payload: {tenant: acme}}
- name: digest-globex
  spec: '0 9 * * *'
  tz: America/New_York
  task: {kind: digest, payload: {tenant: globex}}
";

fn spec_of(srv: &Server, name: &str) -> String {
    srv.json(&["schedule", "get", name])["spec"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_file_is_applied_as_a_group_tried_dry_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let file = dir.path().join("schedules.yaml");
    std::fs::write(&file, FILE).unwrap();
    let f = file.to_str().unwrap();
    let out = srv.ok(&["schedule", "apply", "-f", f, "--group", "tenants"]);
    assert_eq!(
        out,
        "created cleanup\ncreated digest-acme\n2 created, 0 updated, 0 unchanged, 0 removed\n"
    );
    let again = srv.ok(&["schedule", "apply", "-f", f, "--group", "tenants"]);
    assert_eq!(again, "0 created, 0 updated, 2 unchanged, 0 removed\n");
    // Changed and tried: what would change is printed, nothing changes.
    std::fs::write(&file, CHANGED).unwrap();
    let args = [
        "schedule", "apply", "-f", f, "--group", "tenants", "--prune",
    ];
    let dry = srv.ok(&[&args[..], &["--dry-run"]].concat());
    assert_eq!(
        dry,
        "would create digest-globex\nwould update digest-acme\nwould remove cleanup\n\
         dry run: 1 created, 1 updated, 0 unchanged, 1 removed\n"
    );
    assert_eq!(spec_of(&srv, "digest-acme"), "0 9 * * *");
    assert_eq!(spec_of(&srv, "cleanup"), "every 1h");
    // For real; `--json` is the API's report.
    let report = srv.json(&args);
    assert_eq!(report["removed"], serde_json::json!(["cleanup"]));
    assert_eq!(spec_of(&srv, "digest-acme"), "0 8 * * *");
    let gone = srv.sked(&["schedule", "get", "cleanup"]);
    assert_eq!(gone.status.code(), Some(2));
    let listed = srv.json(&["schedule", "ls"]);
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["digest-acme", "digest-globex"]);
    // Listed by prefix, a page at a time; the next page is named.
    srv.ok(&["schedule", "add", "other", "--every", "1h", "--kind", "k"]);
    let page = srv.sked(&["schedule", "ls", "--prefix", "digest-", "--limit", "1"]);
    assert!(page.status.success());
    let table = String::from_utf8_lossy(&page.stdout);
    assert!(
        table.contains("digest-acme") && !table.contains("digest-globex"),
        "{table}"
    );
    let more = String::from_utf8_lossy(&page.stderr);
    assert!(more.contains("more follow: --after digest-acme"), "{more}");
    let rest = srv.ok(&[
        "schedule",
        "ls",
        "--prefix",
        "digest-",
        "--after",
        "digest-acme",
    ]);
    assert!(
        rest.contains("digest-globex") && !rest.contains("other"),
        "{rest}"
    );
    let paused = srv.json(&["schedule", "ls", "--paused"]);
    assert_eq!(paused["schedules"], serde_json::json!([]));
}

#[test]
fn a_bad_file_changes_nothing_and_names_each_bad_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(dir.path(), &[]);
    let file = dir.path().join("bad.yml");
    let bad = format!(
        "{FILE}- name: typo\n  spec: '61 * * * *'\n  task: {{kind: k}}\n\
         - name: mars\n  spec: every 1m\n  tz: Mars/Olympus\n  task: {{kind: k}}\n\
         - name: extra\n  spec: every 1m\n  task: {{kind: k}}\n  colour: red\n\
         - name: cleanup\n  spec: every 2h\n  task: {{kind: cleanup}}\n"
    );
    std::fs::write(&file, bad).unwrap();
    let out = srv.sked(&["schedule", "apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "4 invalid schedules",
        "schedule \"typo\"",
        "schedule \"mars\"",
        "schedule \"extra\": unknown field `colour`",
        "schedule \"cleanup\" is given twice",
    ] {
        assert!(err.contains(needle), "{needle} in {err}");
    }
    assert_eq!(
        srv.json(&["schedule", "ls"])["schedules"],
        serde_json::json!([])
    );
    // Pruning without a group, a missing file, and the same bad file without a server.
    let prune = srv.sked(&["schedule", "apply", "-f", file.to_str().unwrap(), "--prune"]);
    assert_eq!(prune.status.code(), Some(2));
    let missing = srv.sked(&["schedule", "apply", "-f", "/nonexistent/s.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read -f /nonexistent/s.yaml")
    );
    let offline = Command::new(SKED)
        .args(["schedule", "apply", "-f", file.to_str().unwrap()])
        .env("SKED_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(offline.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&offline.stderr).contains("schedule \"typo\""));
}
