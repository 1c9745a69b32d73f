//! When a queue's tasks started, as the server recorded it (each task's `started_at`, the
//! instant its claim took it), and how many starts the busiest window of a period holds.

use std::path::Path;

use super::Server;

/// Enqueues `n` shell tasks of `queue` running `command`, in one import (one transaction).
pub fn enqueue(srv: &Server, dir: &Path, queue: &str, n: usize, command: &str) {
    let line = serde_json::json!({
        "kind": "shell",
        "queue": queue,
        "payload": {"command": command},
    })
    .to_string();
    let file = dir.join(format!("{queue}.jsonl"));
    std::fs::write(&file, vec![line; n].join("\n")).unwrap();
    srv.ok(&["task", "import", file.to_str().unwrap()]);
}

/// The start instants (nanoseconds) of `queue`'s tasks that have started, sorted.
pub fn of_queue(srv: &Server, queue: &str) -> Vec<i128> {
    let listed = srv.json(&["task", "ls", "--queue", queue, "--limit", "1000"]);
    let mut starts: Vec<i128> = listed["tasks"]
        .as_array()
        .expect("a task list")
        .iter()
        .filter_map(|t| t["started_at"].as_str())
        .map(|at| at.parse::<jiff::Timestamp>().unwrap().as_nanosecond())
        .collect();
    starts.sort();
    starts
}

/// The most starts any window of `period_ns` holds (open at its start, as a rate limit's).
pub fn busiest(starts: &[i128], period_ns: i128) -> usize {
    starts
        .iter()
        .map(|end| {
            starts
                .iter()
                .filter(|t| **t > end - period_ns && *t <= end)
                .count()
        })
        .max()
        .unwrap_or(0)
}
