//! `sked task retry|cancel|rm`: one task by id, or every task a filter matches, in bounded
//! batches through `POST /v1/tasks/bulk`, with a progress line on a terminal and `--dry-run`
//! to count first.

use std::io::IsTerminal;

use clap::Args;
use sked::Client;
use sked::api::{BulkAnswer, BulkRequest};
use sked::store::BulkAction;
use sked_core::TaskState;

use crate::{CliError, CliResult, Remote};

use super::{failed, show, task_id};

/// A task by id, or a filter for many.
#[derive(Args)]
pub(crate) struct Target {
    /// The task's id (or give a filter: --state, with --queue, --kind, --before)
    #[arg(required_unless_present = "state", conflicts_with_all = ["state", "queue", "kind", "key", "workflow", "before", "dry_run"])]
    id: Option<String>,
    /// Every task in these states (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "STATES")]
    state: Vec<String>,
    /// With --state: only tasks of this queue
    #[arg(long, requires = "state")]
    queue: Option<String>,
    /// With --state: only tasks of this kind
    #[arg(long, requires = "state")]
    kind: Option<String>,
    /// With --state: only tasks of this concurrency key
    #[arg(long, requires = "state")]
    key: Option<String>,
    /// With --state: only tasks of this workflow
    #[arg(long, requires = "state", value_name = "ID")]
    workflow: Option<i64>,
    /// With --state: only tasks enqueued before this time (RFC 3339, or relative like -1h)
    #[arg(
        long,
        requires = "state",
        value_name = "TIME",
        allow_hyphen_values = true
    )]
    before: Option<String>,
    /// With --state: print how many tasks match; change nothing
    #[arg(long, requires = "state")]
    dry_run: bool,
    /// With --state: tasks per batch (each batch is one short transaction)
    #[arg(long, default_value_t = sked::api::DEFAULT_BULK_BATCH, value_name = "N")]
    batch: u32,
}

impl Target {
    /// The task's id, when one is named.
    pub(crate) fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

/// What a bulk run did, for `--json`.
#[derive(serde::Serialize)]
struct Done {
    action: &'static str,
    changed: u64,
}

/// Runs `action` on every task the target's filter matches, batch after batch.
pub(crate) async fn run(
    client: &Client,
    action: BulkAction,
    t: Target,
    remote: &Remote,
) -> CliResult {
    let mut state = Vec::new();
    for s in &t.state {
        state.push(
            TaskState::parse(s).map_err(|e| CliError::usage(format!("invalid --state: {e}")))?,
        );
    }
    let before = match &t.before {
        Some(b) => Some(
            sked_core::parse_time(b, jiff::Timestamp::now())
                .map_err(|e| CliError::usage(format!("invalid --before: {e}")))?,
        ),
        None => None,
    };
    let req = BulkRequest {
        action,
        state,
        queue: t.queue,
        kind: t.kind,
        before,
        since: None,
        key: t.key,
        unique_key: None,
        workflow: t.workflow,
        after: None,
        limit: Some(t.batch),
        dry_run: true,
    };
    run_request(client, req, t.dry_run, remote).await
}

/// Runs `req` batch after batch (or counts what it matches, with `dry_run`), saying how far
/// it got on a terminal and what it did at the end.
pub(crate) async fn run_request(
    client: &Client,
    mut req: BulkRequest,
    dry_run: bool,
    remote: &Remote,
) -> CliResult {
    let action = req.action;
    req.dry_run = true;
    let counted = client.task_bulk(&req).await.map_err(failed)?;
    let matched = counted.matched.unwrap_or(0);
    if dry_run {
        show(remote, &counted, |a: &BulkAnswer| {
            out!("{} tasks match", a.matched.unwrap_or(0))
        });
        return Ok(());
    }
    req.dry_run = false;
    let progress = !remote.json && std::io::stderr().is_terminal();
    let mut changed = 0u64;
    loop {
        let answer = client.task_bulk(&req).await.map_err(failed)?;
        changed += answer.changed;
        if progress {
            eprint!("\r{}: {changed} of about {matched}", action.as_str());
        }
        match answer.next_after {
            Some(after) => req.after = Some(after),
            None => break,
        }
    }
    if progress {
        eprintln!();
    }
    let done = Done {
        action: action.as_str(),
        changed,
    };
    show(remote, &done, |d| {
        let verb = match action {
            BulkAction::Retry => "retried",
            BulkAction::Cancel => "cancelled",
            BulkAction::Delete => "deleted",
        };
        out!("{verb} {} tasks", d.changed)
    });
    Ok(())
}

/// The id of a single-task target, checked.
pub(crate) fn single(t: &Target) -> Result<Option<sked_core::TaskId>, CliError> {
    t.id().map(task_id).transpose()
}
