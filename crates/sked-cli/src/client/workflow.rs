//! `sked workflow`: make a workflow from a JSON or YAML file, read it, list, wait, cancel.

use std::path::PathBuf;

use clap::Subcommand;
use sked_core::{NewWorkflow, TaskState};
use sked_store::{WorkflowInfo, WorkflowState};

use super::{connect, failed, flag_duration, show};
use crate::output::{table, time};
use crate::{CliError, CliResult, Remote};

#[derive(Subcommand)]
pub(crate) enum WorkflowCmd {
    /// Make a workflow from a file (JSON or YAML, `-` for standard input): its tasks, each
    /// with a `name` and the names it waits for in `after`, made all or none; prints its id.
    Add {
        /// The workflow's file: {name?, tasks: [{name, kind, after?, …}]}
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// Show a workflow: its state, its tasks counted by state, and its tasks.
    Get {
        /// The workflow's id
        id: String,
        /// Show at most this many of its tasks
        #[arg(long, default_value_t = 100, value_name = "N")]
        limit: u32,
    },
    /// List workflows, newest first.
    Ls {
        /// At most this many
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: u32,
    },
    /// Cancel every task of a workflow that has not ended (running ones are asked to stop).
    Cancel {
        /// The workflow's id
        id: String,
    },
    /// Wait until every task of a workflow has ended: exit 0 when they all succeeded, 1 when
    /// one ended dead or cancelled, 3 when --timeout passed first
    Wait {
        /// The workflow's id
        id: String,
        /// How long to wait at most (e.g. 1m)
        #[arg(long, default_value = "1h", value_name = "DUR")]
        timeout: String,
    },
}

fn workflow_id(id: &str) -> CliResult<i64> {
    id.parse().map_err(|_| {
        CliError::usage(format!(
            "invalid workflow id {id:?}: workflow ids are integers"
        ))
    })
}

pub(crate) async fn workflow(cmd: WorkflowCmd, remote: &Remote) -> CliResult {
    let client = connect(remote)?;
    match cmd {
        WorkflowCmd::Add { file } => {
            let value = crate::schedule_file::read_value("-f", &file)?;
            let shown = file.display();
            let workflow: NewWorkflow = serde_json::from_value(value)
                .map_err(|e| CliError::usage(format!("invalid -f {shown}: {e}")))?;
            workflow
                .layers()
                .map_err(|e| CliError::usage(format!("invalid -f {shown}: {e}")))?;
            let made = client.workflow_create(&workflow).await.map_err(failed)?;
            show(remote, &made, |m| out!("{}", m.id));
        }
        WorkflowCmd::Get { id, limit } => {
            let id = workflow_id(&id)?;
            let w = client.workflow(id).await.map_err(failed)?;
            let tasks = client
                .workflow_tasks(id, None, limit.clamp(1, 1000))
                .await
                .map_err(failed)?;
            if remote.json {
                let both = serde_json::json!({"workflow": w, "tasks": tasks});
                show(remote, &both, |_| {});
                return Ok(());
            }
            print_workflow(&w);
            out!("");
            let rows = (tasks.tasks.iter())
                .map(|n| {
                    vec![
                        n.name.clone(),
                        n.id.to_string(),
                        n.state.to_string(),
                        n.kind.clone(),
                        match n.after.is_empty() {
                            true => "-".into(),
                            false => n.after.join(", "),
                        },
                    ]
                })
                .collect();
            table(&["NAME", "TASK", "STATE", "KIND", "AFTER"], rows);
            if tasks.next_after.is_some() {
                out!("… more: sked task ls --workflow {id}, or sked workflow get {id} --limit N");
            }
        }
        WorkflowCmd::Ls { limit } => {
            let page = client
                .workflows(None, limit.clamp(1, 1000))
                .await
                .map_err(failed)?;
            show(remote, &page, |p| {
                let rows = (p.workflows.iter())
                    .map(|w| {
                        vec![
                            w.id.to_string(),
                            w.name.clone().unwrap_or_else(|| "-".into()),
                            w.state.as_str().to_string(),
                            format!("{}/{}", ended(w), w.total),
                            time(Some(w.created_at)),
                            time(w.finished_at),
                        ]
                    })
                    .collect();
                table(
                    &["ID", "NAME", "STATE", "ENDED", "CREATED", "FINISHED"],
                    rows,
                );
            });
        }
        WorkflowCmd::Cancel { id } => {
            let w = client
                .workflow_cancel(workflow_id(&id)?)
                .await
                .map_err(failed)?;
            show(remote, &w, |w| {
                out!("workflow {} {} ({})", w.id, w.state.as_str(), counts(w))
            });
        }
        WorkflowCmd::Wait { id, timeout } => {
            let id = workflow_id(&id)?;
            let limit = flag_duration("--timeout", &timeout)?;
            let limit = std::time::Duration::try_from(limit)
                .map_err(|_| CliError::usage("invalid --timeout: it must not be negative"))?;
            let deadline = std::time::Instant::now() + limit;
            let w = loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                let w = client
                    .workflow_wait(id, left.min(super::task::WAIT_STEP))
                    .await
                    .map_err(failed)?;
                if w.done || left <= super::task::WAIT_STEP {
                    break w;
                }
            };
            show(remote, &w, |w| {
                out!("workflow {} {} ({})", w.id, w.state.as_str(), counts(w))
            });
            match w.state {
                WorkflowState::Succeeded => {}
                WorkflowState::Active => {
                    return Err(CliError::Exit(
                        3,
                        format!(
                            "workflow {id} is still active after {timeout} ({})",
                            counts(&w)
                        ),
                    ));
                }
                s => {
                    return Err(CliError::Exit(
                        1,
                        format!("workflow {id} {} ({})", s.as_str(), counts(&w)),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// How many of its tasks have ended.
fn ended(w: &WorkflowInfo) -> u64 {
    (w.counts.iter())
        .filter(|(s, _)| s.is_finished())
        .map(|(_, n)| n)
        .sum()
}

/// Its counts as people read them, in the order tasks move: `2 waiting, 1 running, 3 succeeded`.
fn counts(w: &WorkflowInfo) -> String {
    let parts: Vec<String> = (TaskState::ALL.iter())
        .filter_map(|s| w.counts.get(s).map(|n| format!("{n} {s}")))
        .collect();
    match parts.is_empty() {
        true => "no tasks left".into(),
        false => parts.join(", "),
    }
}

fn print_workflow(w: &WorkflowInfo) {
    let mut rows = vec![
        ("id", w.id.to_string()),
        ("name", w.name.clone().unwrap_or_else(|| "-".into())),
        ("state", w.state.as_str().to_string()),
        ("tasks", format!("{} ({})", w.total, counts(w))),
        ("created", time(Some(w.created_at))),
        ("finished", time(w.finished_at)),
    ];
    if let Some(s) = &w.schedule {
        rows.push(("schedule", s.clone()));
    }
    for (k, v) in rows {
        out!("{k:<9} {v}");
    }
}
