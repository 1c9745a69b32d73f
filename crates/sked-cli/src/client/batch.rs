//! `sked batch`: open a batch with its callbacks, close it, read it, list, wait. Tasks join one
//! with `sked task add … --batch ID`.

use clap::{Args, Subcommand};
use sked_core::{NewBatch, NewTask, TaskState};
use sked_store::{BatchInfo, BatchState};

use super::{connect, failed, flag_duration, show};
use crate::output::{table, time};
use crate::{CliError, CliResult, Remote};

#[derive(Subcommand)]
pub(crate) enum BatchCmd {
    /// Open a batch; prints its id. Its callbacks are enqueued once, when it is closed and
    /// every task of it has ended (on_complete) or succeeded (on_success), with the batch's
    /// counts in their payloads.
    Open(Open),
    /// Close a batch: no task joins it any more but from its own tasks, and its callbacks run
    /// once its tasks have ended (at once when they have).
    Close {
        /// The batch's id
        id: String,
    },
    /// Show a batch: its state, its tasks counted by state, its callbacks.
    Get {
        /// The batch's id
        id: String,
    },
    /// List batches, newest first.
    Ls {
        /// At most this many
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: u32,
    },
    /// Wait until a batch is done (its callbacks enqueued): exit 0 when every task of it
    /// succeeded, 1 when one did not, 3 when --timeout passed first
    Wait {
        /// The batch's id
        id: String,
        /// How long to wait at most (e.g. 1m)
        #[arg(long, default_value = "1h", value_name = "DUR")]
        timeout: String,
    },
}

#[derive(Args)]
pub(crate) struct Open {
    /// A label for people
    #[arg(long)]
    name: Option<String>,
    /// The task to enqueue once every task of the batch has succeeded: its kind
    #[arg(long, value_name = "KIND")]
    on_success_kind: Option<String>,
    /// …its payload (a JSON object; it gains `batch`: the id and the counts)
    #[arg(long, value_name = "JSON", requires = "on_success_kind")]
    on_success_payload: Option<String>,
    /// …its queue
    #[arg(long, value_name = "QUEUE", requires = "on_success_kind")]
    on_success_queue: Option<String>,
    /// The task to enqueue once every task of the batch has ended, however: its kind
    #[arg(long, value_name = "KIND")]
    on_complete_kind: Option<String>,
    /// …its payload (a JSON object; it gains `batch`: the id and the counts)
    #[arg(long, value_name = "JSON", requires = "on_complete_kind")]
    on_complete_payload: Option<String>,
    /// …its queue
    #[arg(long, value_name = "QUEUE", requires = "on_complete_kind")]
    on_complete_queue: Option<String>,
}

fn batch_id(id: &str) -> CliResult<i64> {
    id.parse()
        .map_err(|_| CliError::usage(format!("invalid batch id {id:?}: batch ids are integers")))
}

/// A callback from its flags.
fn callback(
    flag: &str,
    kind: Option<String>,
    payload: Option<&str>,
    queue: Option<String>,
) -> CliResult<Option<NewTask>> {
    let Some(kind) = kind else { return Ok(None) };
    let payload = match payload {
        None => serde_json::Value::Null,
        Some(p) => serde_json::from_str(p)
            .map_err(|e| CliError::usage(format!("invalid --{flag}-payload JSON: {e}")))?,
    };
    let mut t = NewTask::new(kind).payload(payload);
    if let Some(q) = queue {
        t = t.queue(q);
    }
    Ok(Some(t))
}

pub(crate) async fn batch(cmd: BatchCmd, remote: &Remote) -> CliResult {
    let client = connect(remote)?;
    match cmd {
        BatchCmd::Open(o) => {
            let b = NewBatch {
                name: o.name,
                on_success: callback(
                    "on-success",
                    o.on_success_kind,
                    o.on_success_payload.as_deref(),
                    o.on_success_queue,
                )?,
                on_complete: callback(
                    "on-complete",
                    o.on_complete_kind,
                    o.on_complete_payload.as_deref(),
                    o.on_complete_queue,
                )?,
            };
            b.validate().map_err(CliError::usage)?;
            let opened = client.batch_open(&b).await.map_err(failed)?;
            show(remote, &opened, |b| out!("{}", b.id));
        }
        BatchCmd::Close { id } => {
            let b = client.batch_close(batch_id(&id)?).await.map_err(failed)?;
            show(remote, &b, |b| {
                out!("batch {} {} ({})", b.id, b.state.as_str(), counts(b))
            });
        }
        BatchCmd::Get { id } => {
            let b = client.batch(batch_id(&id)?).await.map_err(failed)?;
            show(remote, &b, print_batch);
        }
        BatchCmd::Ls { limit } => {
            let page = client
                .batches(None, limit.clamp(1, 1000))
                .await
                .map_err(failed)?;
            show(remote, &page, |p| {
                let rows = (p.batches.iter())
                    .map(|b| {
                        vec![
                            b.id.to_string(),
                            b.name.clone().unwrap_or_else(|| "-".into()),
                            b.state.as_str().to_string(),
                            b.total.to_string(),
                            counts(b),
                            time(Some(b.created_at)),
                            time(b.done_at),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "ID", "NAME", "STATE", "TASKS", "BY STATE", "CREATED", "DONE",
                    ],
                    rows,
                );
            });
        }
        BatchCmd::Wait { id, timeout } => {
            let id = batch_id(&id)?;
            let limit = flag_duration("--timeout", &timeout)?;
            let limit = std::time::Duration::try_from(limit)
                .map_err(|_| CliError::usage("invalid --timeout: it must not be negative"))?;
            let deadline = std::time::Instant::now() + limit;
            let b = loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let b = client
                    .batch_wait(id, left.min(super::task::WAIT_STEP))
                    .await
                    .map_err(failed)?;
                if b.state == BatchState::Done || left <= super::task::WAIT_STEP {
                    break b;
                }
            };
            show(remote, &b, |b| {
                out!("batch {} {} ({})", b.id, b.state.as_str(), counts(b))
            });
            if b.state != BatchState::Done {
                return Err(CliError::Exit(
                    3,
                    format!(
                        "batch {id} is still {} after {timeout} ({})",
                        b.state.as_str(),
                        counts(&b)
                    ),
                ));
            }
            let succeeded = (b.counts.iter()).all(|(s, n)| *n == 0 || *s == TaskState::Succeeded);
            if !succeeded {
                return Err(CliError::Exit(
                    1,
                    format!(
                        "batch {id} is done, not every task succeeded ({})",
                        counts(&b)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Its counts as people read them, in the order tasks move: `2 running, 3 succeeded`.
fn counts(b: &BatchInfo) -> String {
    let parts: Vec<String> = (TaskState::ALL.iter())
        .filter_map(|s| b.counts.get(s).map(|n| format!("{n} {s}")))
        .collect();
    match parts.is_empty() {
        true => "no tasks".into(),
        false => parts.join(", "),
    }
}

fn print_batch(b: &BatchInfo) {
    let callback = |t: &Option<NewTask>, made: Option<i64>| match (t, made) {
        (None, _) => "-".to_string(),
        (Some(t), Some(id)) => format!("{} (task {id})", t.kind),
        (Some(t), None) => format!("{} (not enqueued)", t.kind),
    };
    let rows = [
        ("id", b.id.to_string()),
        ("name", b.name.clone().unwrap_or_else(|| "-".into())),
        ("state", b.state.as_str().to_string()),
        ("tasks", format!("{} ({})", b.total, counts(b))),
        ("on_success", callback(&b.on_success, b.on_success_task)),
        ("on_complete", callback(&b.on_complete, b.on_complete_task)),
        ("created", time(Some(b.created_at))),
        ("closed", time(b.closed_at)),
        ("done", time(b.done_at)),
    ];
    for (k, v) in rows {
        out!("{k:<12} {v}");
    }
}
