//! Enqueuing from other languages in their own transactions, through `sked_enqueue`: a Python
//! program with psycopg and a Node program with node-postgres, installed from their
//! registries, against a `sked server` on PostgreSQL. The README's two examples run as
//! written; then each program rolls a task back (none is made), passes a bad argument (a
//! PostgreSQL error names it, nothing is made), and commits 200 tasks one at a time, each run
//! by the idle server within 50 ms at the 99th percentile. A binary of its own, so that the
//! other slow tests' installs and builds do not run beside that bound.

#[path = "common/mod.rs"]
mod common;

#[path = "clients/client_packages.rs"]
#[allow(dead_code)]
mod client_packages;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use sked_postgres::testing::{TestSchema, database_url};

use crate::client_packages::{repository, succeeded};
use crate::common::{Server, stamp, wait_for};

const PSYCOPG: &str = "psycopg[binary]==3.3.9";
const NODE_POSTGRES: &str = "pg@8.23.1";

/// The README's example in `lang` (`python`, `js`) under "Enqueuing from any language".
fn readme_example(lang: &str) -> String {
    let readme = std::fs::read_to_string(repository().join("README.md")).unwrap();
    let section = &readme[readme
        .find("### Enqueuing from any language")
        .expect("the README's section")..];
    let fence = format!("```{lang}\n");
    let start = section.find(&fence).expect("an example") + fence.len();
    section[start..start + section[start..].find("```").unwrap()].to_string()
}

/// What each program does after the README's example, printing `refused: MESSAGE` and then
/// the ids of the 200 tasks it committed.
const PYTHON: &str = r#"
import os, sys, time
import psycopg
from psycopg.types.json import Jsonb

conn = psycopg.connect(os.environ["DATABASE_URL"])
conn.execute("SELECT sked_enqueue('rolled-back')")
conn.rollback()
try:
    conn.execute("SELECT sked_enqueue('refused', max_attempts => 0)")
    sys.exit("a bad argument was taken")
except psycopg.errors.InvalidParameterValue as e:
    print("refused:", e.diag.message_primary)
conn.rollback()
ids = []
for _ in range(200):
    row = conn.execute(
        "SELECT sked_enqueue('shell', %s, queue => 'from-python')", (Jsonb({"command": "true"}),)
    ).fetchone()
    conn.commit()
    ids.append(row[0])
    time.sleep(0.02)
print(" ".join(map(str, ids)))
"#;

const NODE: &str = r#"
import pg from "pg";

const c = new pg.Client(process.env.DATABASE_URL);
await c.connect();
await c.query("BEGIN");
await c.query("SELECT sked_enqueue('rolled-back')");
await c.query("ROLLBACK");
try {
  await c.query("SELECT sked_enqueue('refused', max_attempts => 0)");
  throw new Error("a bad argument was taken");
} catch (e) {
  if (e.code !== "22023") throw e;
  console.log(`refused: ${e.message}`);
}
const ids = [];
for (let i = 0; i < 200; i++) {
  await c.query("BEGIN");
  const { rows } = await c.query("SELECT sked_enqueue('shell', $1, queue => 'from-node') AS id", [{ command: "true" }]);
  await c.query("COMMIT");
  ids.push(rows[0].id);
  await new Promise((done) => setTimeout(done, 20));
}
console.log(ids.join(" "));
await c.end();
"#;

/// Runs `sql` on the schema with psql.
fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .unwrap();
    succeeded(&out);
    String::from_utf8(out.stdout).unwrap()
}

/// Checks what a program printed and did: the refusal, no rolled-back or refused task, and
/// its 200 tasks run, each within 50 ms of its enqueue at the 99th percentile.
fn check(server: &Server, url: &str, printed: &str, queue: &str) {
    let mut lines = printed.lines();
    let refused = lines.next().unwrap();
    assert!(
        refused.contains("sked: max_attempts must be at least 1, got 0"),
        "{printed}"
    );
    let ids: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(ids.len(), 200, "{printed}");
    let made = psql(
        url,
        "SELECT count(*) FROM sked_tasks WHERE kind IN ('rolled-back', 'refused')",
    );
    assert_eq!(made.trim(), "0", "a rolled-back or refused task was made");
    let listed = || -> Vec<Value> {
        let page = server.json(&[
            "task",
            "ls",
            "--queue",
            queue,
            "--state",
            "succeeded",
            "--limit",
            "500",
        ]);
        page["tasks"].as_array().unwrap().clone()
    };
    wait_for("the 200 tasks to run", Duration::from_secs(60), || {
        listed().len() == 200
    });
    let mut waits: Vec<i64> = listed()
        .iter()
        .map(|t| {
            (stamp(t, "started_at") - stamp(t, "created_at"))
                .total(jiff::Unit::Millisecond)
                .unwrap() as i64
        })
        .collect();
    waits.sort();
    let p99 = waits[197];
    eprintln!(
        "{queue}: from enqueue to start, p50 {} ms, p99 {p99} ms, max {} ms",
        waits[99], waits[199]
    );
    assert!(p99 <= 50, "p99 {p99} ms: {waits:?}");
}

/// The README's examples made their orders and tasks.
fn examples_ran(url: &str) {
    let tasks = psql(
        url,
        "SELECT payload->>'order', queue, state FROM sked_tasks \
         WHERE kind = 'send-receipt' ORDER BY id",
    );
    assert_eq!(
        tasks.trim(),
        "42|mail|available\n43|mail|scheduled",
        "{tasks}"
    );
    assert_eq!(psql(url, "SELECT count(*) FROM orders").trim(), "2");
}

#[test]
#[ignore = "slow tier"]
fn python_and_node_enqueue_in_their_own_transactions() {
    let Some(base) = database_url() else { return };
    let schema = TestSchema::new(&base);
    let url = schema.url();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_on(dir.path(), &url, &["--exec", "shell"], &[], "server.log");
    psql(&url, "CREATE TABLE orders (id bigint PRIMARY KEY)");

    let venv = crate::client_packages::venv_with(dir.path(), &[Path::new(PSYCOPG)]);
    let python = |script: &str| {
        let out = Command::new(venv.join("bin/python"))
            .args(["-c", script])
            .env("DATABASE_URL", &url)
            .output()
            .unwrap();
        succeeded(&out);
        String::from_utf8(out.stdout).unwrap()
    };
    python(&readme_example("python"));

    let project = crate::client_packages::node_project(dir.path(), "app");
    let npm = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", NODE_POSTGRES])
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&npm);
    let node = |script: &str| {
        std::fs::write(project.join("program.mjs"), script).unwrap();
        let out = Command::new("node")
            .arg("program.mjs")
            .env("DATABASE_URL", &url)
            .current_dir(&project)
            .output()
            .unwrap();
        succeeded(&out);
        String::from_utf8(out.stdout).unwrap()
    };
    node(&readme_example("js"));
    examples_ran(&url);

    check(&server, &url, &python(PYTHON), "from-python");
    check(&server, &url, &node(NODE), "from-node");
}
