//! `sked queue …`: list queues, pause and resume them, set their concurrency and rate limits
//! and how long they keep ended tasks.

use clap::Subcommand;
use sked::api::QueueList;
use sked::client::IfMissing;
use sked::store::KeyOrder;
use sked::{QueueInfo, TaskState};

use crate::output::{opt, queue_count, table};
use crate::{CliError, CliResult, Remote};

use super::{connect, failed, show};

#[derive(Subcommand)]
pub(crate) enum QueueCmd {
    /// Queues with task counts per state.
    Ls,
    /// One queue: its settings, its counts per state and why its tasks wait.
    Get {
        /// The queue's name
        queue: String,
    },
    /// Pause a queue: its tasks wait, running ones finish.
    Pause {
        /// The queue's name
        queue: String,
        /// Set the queue up if no task or setting names it yet (to pause it before its first
        /// task); without it such a name is refused as a likely typo
        #[arg(long)]
        create: bool,
    },
    /// Resume a paused queue.
    Resume {
        /// The queue's name
        queue: String,
        /// Set the queue up if no task or setting names it yet
        #[arg(long)]
        create: bool,
    },
    /// Remove a queue that has no unfinished task: its ended tasks are deleted, its pause and
    /// limits go, and it leaves `queue ls`.
    Rm {
        /// The queue's name
        queue: String,
    },
    /// Limit the queue: how many of its tasks run at once, how many start per period
    /// (`none` removes a limit; limits not named stay as they are).
    Limit {
        /// The queue's name
        queue: String,
        /// Shorthand for --concurrency
        #[arg(value_name = "N|none")]
        limit: Option<String>,
        /// Most tasks running at once across every worker, or none
        #[arg(long, value_name = "N|none", conflicts_with = "limit")]
        concurrency: Option<String>,
        /// Most tasks started in any window of the period, across every worker: 10/s, 20/min,
        /// 5/h, 1000/d (a quota), or none
        #[arg(long, value_name = "N/PERIOD|none")]
        rate: Option<String>,
        /// With --rate: starts a quiet queue may make beyond the rate in one window; the
        /// long-run rate stays the rate
        #[arg(long, value_name = "N", requires = "rate")]
        burst: Option<u32>,
        /// Most tasks of one key (`sked task add --key K`) running at once, or none; claims
        /// take keys in turn, so one key's backlog does not hold the others back
        #[arg(long, value_name = "N|none", allow_hyphen_values = true)]
        per_key: Option<String>,
        /// Most tasks of one key started in any window of the period: 5/s, 100/h, or none
        #[arg(long, value_name = "N/PERIOD|none")]
        per_key_rate: Option<String>,
        /// The order of one key's tasks: strict (one at a time, and a task that started keeps
        /// its key until it ends well: its retries come before the key's next task, and a dead
        /// one stops the key until it is retried or deleted; needs --per-key 1), or priority
        /// (the default: a task waiting to retry lets the key's next one start)
        #[arg(long, value_name = "strict|priority")]
        order: Option<String>,
        /// Set the queue up if no task or setting names it yet (to limit it before its first
        /// task); without it such a name is refused as a likely typo
        #[arg(long)]
        create: bool,
    },
    /// How long the retries of the queue's tasks without a backoff of their own wait (`none`:
    /// the default, exp:10s..6h).
    Backoff {
        /// The queue's name
        queue: String,
        /// exp:BASE..MAX, fixed:D, linear:STEP..MAX, a list like 10s,1m,10m, or none
        #[arg(value_name = "SHAPE|none")]
        backoff: String,
        /// Set the queue up if no task or setting names it yet
        #[arg(long)]
        create: bool,
    },
    /// How long the queue keeps its ended tasks, by the state they ended in (`none`: the
    /// server's --retention; states not named stay as they are).
    Retention {
        /// The queue's name
        queue: String,
        /// Keep succeeded tasks this long after they ended (e.g. 1h), or none
        #[arg(long, value_name = "DUR|none", allow_hyphen_values = true)]
        succeeded: Option<String>,
        /// Keep dead tasks this long (e.g. 30d), or none
        #[arg(long, value_name = "DUR|none", allow_hyphen_values = true)]
        dead: Option<String>,
        /// Keep cancelled tasks this long, or none
        #[arg(long, value_name = "DUR|none", allow_hyphen_values = true)]
        cancelled: Option<String>,
        /// Keep expired tasks this long, or none
        #[arg(long, value_name = "DUR|none", allow_hyphen_values = true)]
        expired: Option<String>,
        /// Set the queue up if no task or setting names it yet
        #[arg(long)]
        create: bool,
    },
}

/// The limits `sked queue limit` was given.
fn limits(
    limit: Option<String>,
    concurrency: Option<String>,
    rate: Option<String>,
    burst: Option<u32>,
    per_key: Option<String>,
    per_key_rate: Option<String>,
    order: Option<String>,
) -> Result<sked::api::QueueLimit, CliError> {
    let count = |what: &str, v: Option<String>| match v {
        None => Ok(None),
        Some(n) if n == "none" => Ok(Some(None)),
        Some(n) => n.parse::<u32>().map(|n| Some(Some(n))).map_err(|_| {
            CliError::usage(format!(
                "invalid {what} {n:?}: expected a whole number or none"
            ))
        }),
    };
    let concurrency = count("concurrency limit", limit.or(concurrency))?;
    let per_key = count("--per-key limit", per_key)?;
    let rate_of = |flag: &str, v: Option<String>| match v {
        None => Ok(None),
        Some(r) if r == "none" => Ok(Some(None)),
        Some(r) => r
            .parse::<sked::RateLimit>()
            .map(|r| Some(Some(r)))
            .map_err(|e| CliError::usage(format!("{flag}: {e}"))),
    };
    let rate = rate_of("--rate", rate)?;
    let per_key_rate = rate_of("--per-key-rate", per_key_rate)?;
    let key_order = order
        .map(|o| o.parse::<KeyOrder>())
        .transpose()
        .map_err(|e| CliError::usage(format!("--order: {e}")))?;
    let mut limits = sked::api::QueueLimit {
        concurrency,
        rate,
        burst,
        per_key,
        per_key_rate,
        key_order,
    };
    limits
        .per_key_rate()
        .map_err(|e| CliError::usage(format!("--per-key-rate: {e}")))?;
    if limits.is_empty() {
        return Err(CliError::usage(
            "name a limit: sked queue limit QUEUE N, --concurrency N|none, --rate N/PERIOD|none, --per-key N|none, --per-key-rate N/PERIOD|none or --order strict|priority",
        ));
    }
    // One rate, the burst in it, as the server reads it.
    limits.rate = limits
        .rate_with_burst()
        .map_err(|e| CliError::usage(format!("--burst: {e}")))?;
    limits.burst = None;
    Ok(limits)
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
                                rate(q),
                                per_key(q),
                                held(q),
                            ];
                            row.extend(TaskState::ALL.map(|s| queue_count(q, s)));
                            row
                        })
                        .collect();
                    let states = TaskState::ALL.map(|s| s.as_str().to_uppercase());
                    let mut headers =
                        vec!["QUEUE", "PAUSED", "LIMIT", "RATE", "PER KEY", "HELD BY"];
                    headers.extend(states.iter().map(String::as_str));
                    table(&headers, rows);
                },
            );
            return Ok(());
        }
        QueueCmd::Get { queue } => client.queue(&queue).await.map_err(|e| unknown(e, &queue)),
        QueueCmd::Pause { queue, create } => client
            .queue_pause(&queue, if_missing(create))
            .await
            .map_err(|e| unknown(e, &queue)),
        QueueCmd::Resume { queue, create } => client
            .queue_resume(&queue, if_missing(create))
            .await
            .map_err(|e| unknown(e, &queue)),
        QueueCmd::Rm { queue } => {
            client.queue_remove(&queue).await.map_err(failed)?;
            if !remote.json {
                out!("{queue} removed");
            }
            return Ok(());
        }
        QueueCmd::Limit {
            queue,
            limit,
            concurrency,
            rate,
            burst,
            per_key,
            per_key_rate,
            order,
            create,
        } => {
            let limits = limits(
                limit,
                concurrency,
                rate,
                burst,
                per_key,
                per_key_rate,
                order,
            )?;
            client
                .queue_limits(&queue, limits, if_missing(create))
                .await
                .map_err(|e| unknown(e, &queue))
        }
        QueueCmd::Backoff {
            queue,
            backoff,
            create,
        } => {
            let backoff = match backoff.as_str() {
                "none" => None,
                spec => Some(
                    spec.parse::<sked_core::Backoff>()
                        .map_err(|e| CliError::usage(format!("invalid backoff: {e}")))?,
                ),
            };
            client
                .queue_backoff(&queue, backoff, if_missing(create))
                .await
                .map_err(|e| unknown(e, &queue))
        }
        QueueCmd::Retention {
            queue,
            succeeded,
            dead,
            cancelled,
            expired,
            create,
        } => {
            let given = |v: Option<String>| v.map(|d| (d != "none").then_some(d));
            let change = sked::api::QueueRetentionChange {
                succeeded: given(succeeded),
                dead: given(dead),
                cancelled: given(cancelled),
                expired: given(expired),
            };
            change.changes().map_err(CliError::usage)?;
            client
                .queue_retention(&queue, change, if_missing(create))
                .await
                .map_err(|e| unknown(e, &queue))
        }
    }?;
    show(remote, &q, |q: &QueueInfo| {
        let paused = if q.paused { "paused" } else { "running" };
        out!(
            "{} {paused}, limit {}, rate {}, per key {}, per-key rate {}",
            q.name,
            opt(q.concurrency_limit.as_ref()),
            opt(q.rate.as_ref()),
            opt(q.per_key.as_ref()),
            opt(q.per_key_rate.as_ref())
        );
        let counts: Vec<String> = (TaskState::ALL.into_iter())
            .filter(|s| q.counts.contains_key(s))
            .map(|s| format!("{s} {}", queue_count(q, s)))
            .collect();
        if !counts.is_empty() {
            out!("tasks: {}", counts.join(", "));
        }
        if let Some(h) = q.held {
            out!("its available tasks wait: {}", held_text(h));
        }
        let kept: Vec<String> = (TaskState::ALL.into_iter())
            .filter_map(|s| {
                Some(format!(
                    "{s} {}",
                    sked_core::format_duration(q.retention.of(s)?)
                ))
            })
            .collect();
        if !kept.is_empty() {
            out!(
                "keeps ended tasks: {} (others: the server's retention)",
                kept.join(", ")
            );
        }
        if let Some(b) = &q.backoff {
            out!("retries of tasks without a backoff of their own wait: {b}");
        }
        if q.key_order == KeyOrder::Strict {
            out!(
                "strict order per key: a task that started keeps its key until it ends \
                 well; {} stopped by a dead task",
                keys(q.keys_stopped.unwrap_or(0))
            );
        }
    });
    Ok(())
}

fn if_missing(create: bool) -> IfMissing {
    if create {
        IfMissing::Create
    } else {
        IfMissing::Refuse
    }
}

/// A change refused because no task or setting names the queue: exit 2, saying what to do.
fn unknown(e: sked::Error, queue: &str) -> CliError {
    if e.kind() == sked::store::ErrorKind::NotFound {
        return CliError::usage(format!(
            "no queue {queue:?}: no task or setting names it (see `sked queue ls`); \
             --create sets it up before its first task"
        ));
    }
    failed(e)
}

/// The rate limit, with the starts its window holds now: `7 of 10/s`.
fn rate(q: &QueueInfo) -> String {
    match (&q.rate, q.rate_window) {
        (Some(rate), Some(n)) => format!("{n} of {rate}"),
        (rate, _) => opt(rate.as_ref()),
    }
}

/// Why the queue's available tasks wait: `paused`, `concurrency`, `rate until 12:00:01`.
pub(crate) fn held(q: &QueueInfo) -> String {
    q.held.map_or_else(|| "-".into(), held_text)
}

/// What holds tasks back, and until when if known: `rate until 12:00:01`, `key_order: waits
/// for task 12 (dead)`.
pub(crate) fn held_text(h: sked::store::Held) -> String {
    match (h.until, h.behind) {
        (_, Some(b)) => format!("{}: waits for task {} ({})", h.by.as_str(), b.id, b.state),
        (Some(at), None) => format!("{} until {}", h.by.as_str(), crate::output::time(Some(at))),
        (None, None) => h.by.as_str().into(),
    }
}

/// `1 key`, `3 keys`.
fn keys(n: u64) -> String {
    match n {
        1 => "1 key".into(),
        n => format!("{n} keys"),
    }
}

/// The per-key limits: `2`, `5/s`, `2, 5/s`, `1 strict (2 stopped)`, or `-`.
fn per_key(q: &QueueInfo) -> String {
    let limits = match (q.per_key, q.per_key_rate) {
        (Some(n), Some(r)) => format!("{n}, {r}"),
        (Some(n), None) => n.to_string(),
        (None, Some(r)) => r.to_string(),
        (None, None) => "-".into(),
    };
    match (q.key_order, q.keys_stopped) {
        (KeyOrder::Strict, Some(n)) if n > 0 => format!("{limits} strict ({n} stopped)"),
        (KeyOrder::Strict, _) => format!("{limits} strict"),
        (KeyOrder::Priority, _) => limits,
    }
}
