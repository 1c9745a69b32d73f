//! `sked queue …`: list queues, pause and resume them, set their concurrency limits.

use clap::Subcommand;
use sked::api::QueueList;
use sked::{QueueInfo, TaskState};

use crate::output::{opt, queue_count, table};
use crate::{CliError, CliResult, Remote};

use super::{connect, failed, show};

#[derive(Subcommand)]
pub(crate) enum QueueCmd {
    /// Queues with task counts per state.
    Ls,
    /// Pause a queue: its tasks wait, running ones finish.
    Pause {
        /// The queue's name
        queue: String,
    },
    /// Resume a paused queue.
    Resume {
        /// The queue's name
        queue: String,
    },
    /// Limit how many tasks of the queue run at once (`none` removes the limit).
    Limit {
        /// The queue's name
        queue: String,
        /// Most tasks running at once across every worker, or none
        #[arg(value_name = "N|none")]
        limit: String,
    },
}

pub(crate) async fn queue(cmd: QueueCmd, remote: &Remote) -> CliResult {
    let client = connect(remote)?;
    let q = match cmd {
        QueueCmd::Ls => {
            let queues = client
                .queues(sked::store::QUEUE_COUNT_LIMIT)
                .await
                .map_err(failed)?;
            show(
                remote,
                &QueueList {
                    queues,
                    next_after: None,
                },
                |list| {
                    let rows = list
                        .queues
                        .iter()
                        .map(|q| {
                            let mut row = vec![
                                q.name.clone(),
                                if q.paused { "yes" } else { "no" }.into(),
                                opt(q.concurrency_limit.as_ref()),
                            ];
                            row.extend(TaskState::ALL.map(|s| queue_count(q, s)));
                            row
                        })
                        .collect();
                    table(
                        &[
                            "QUEUE",
                            "PAUSED",
                            "LIMIT",
                            "SCHEDULED",
                            "AVAILABLE",
                            "RUNNING",
                            "RETRYING",
                            "SUCCEEDED",
                            "DEAD",
                            "CANCELLED",
                        ],
                        rows,
                    );
                },
            );
            return Ok(());
        }
        QueueCmd::Pause { queue } => client.queue_pause(&queue).await,
        QueueCmd::Resume { queue } => client.queue_resume(&queue).await,
        QueueCmd::Limit { queue, limit } => {
            let limit = if limit == "none" {
                None
            } else {
                Some(limit.parse::<u32>().map_err(|_| {
                    CliError::usage(format!(
                        "invalid limit {limit:?}: expected a whole number or none"
                    ))
                })?)
            };
            client.queue_limit(&queue, limit).await
        }
    }
    .map_err(failed)?;
    show(remote, &q, |q: &QueueInfo| {
        let paused = if q.paused { "paused" } else { "running" };
        out!(
            "{} {paused}, limit {}",
            q.name,
            opt(q.concurrency_limit.as_ref())
        );
    });
    Ok(())
}
