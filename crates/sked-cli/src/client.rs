//! Commands that talk to a server: tasks, schedules, queues. They go through the typed
//! [`sked::Client`]; tables are drawn from its values, and `--json` prints the same values
//! serialized, as the API sends them.

use clap::{Args, Subcommand};
use serde::Serialize;
use sked::api::{ImportReport, QueueList, ScheduleDetail, ScheduleList, TaskList, Triggered};
use sked::{Client, NewTask, QueueInfo, ScheduleDef, Task, TaskFilter, TaskState, TaskTemplate};

use crate::output::{opt, queue_count, table, time, time_in};
use crate::{CliError, CliResult, Remote};

/// The typed client for the server `remote` names.
pub(crate) fn connect(remote: &Remote) -> CliResult<Client> {
    Client::remote_with(sked::client::RemoteOptions {
        token: remote.token.clone(),
        ..sked::client::RemoteOptions::new(&remote.url)
    })
    .map_err(CliError::usage)
}

/// An error from sked as an exit code: bad input or nothing there is 2, the rest 1.
pub(crate) fn failed(e: sked::Error) -> CliError {
    use sked::store::ErrorKind;
    match e.kind() {
        ErrorKind::Invalid | ErrorKind::NotFound => CliError::usage(e),
        _ => CliError::runtime(e),
    }
}

/// Prints `value` as JSON when asked, else runs `human` on it.
pub(crate) fn show<T: Serialize>(remote: &Remote, value: &T, human: impl FnOnce(&T)) {
    if remote.json {
        out!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        human(value);
    }
}

fn parse_payload(p: Option<&str>) -> CliResult<serde_json::Value> {
    match p {
        None => Ok(serde_json::Value::Null),
        Some(s) => serde_json::from_str(s)
            .map_err(|e| CliError::usage(format!("invalid --payload JSON: {e}"))),
    }
}

fn task_id(id: &str) -> CliResult<i64> {
    id.parse()
        .map_err(|_| CliError::usage(format!("invalid task id {id:?}: task ids are integers")))
}

fn flag_duration(flag: &str, v: &str) -> CliResult<jiff::SignedDuration> {
    sked_core::parse_duration(v).map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
}

#[derive(Subcommand)]
pub(crate) enum TaskCmd {
    /// Enqueue a task; prints its id.
    Add(TaskAdd),
    /// Show a task with its attempts.
    Get {
        /// The task's id
        id: String,
    },
    /// List tasks, newest first.
    Ls {
        /// Only tasks in these states (comma-separated)
        #[arg(long, value_delimiter = ',', value_parser = STATES, value_name = "STATES")]
        state: Vec<String>,
        /// Only tasks of this queue
        #[arg(long)]
        queue: Option<String>,
        /// Only tasks of this kind
        #[arg(long)]
        kind: Option<String>,
        /// Only tasks made by this schedule
        #[arg(long)]
        schedule: Option<String>,
        /// At most this many (1 to 1000)
        #[arg(long, default_value_t = 50, value_name = "N")]
        limit: u32,
    },
    /// Cancel a task (a running one is told at its next heartbeat).
    Cancel {
        /// The task's id
        id: String,
    },
    /// Run a finished task again.
    Retry {
        /// The task's id
        id: String,
    },
    /// Enqueue every task of a JSON-lines file (one task object per line, the API's shape; `-`
    /// for stdin). The whole file is checked first: a bad line enqueues nothing.
    Import {
        /// The file, or - for standard input
        file: String,
        /// Tasks per request.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Move a task that has not started to another time.
    Reschedule {
        /// The task's id
        id: String,
        /// RFC 3339 time, or +DURATION.
        #[arg(long)]
        at: String,
    },
}

#[derive(Args)]
pub(crate) struct TaskAdd {
    /// What the task is: the name a worker's handler (or a built-in executor: shell, http)
    /// is registered under
    #[arg(long)]
    kind: String,
    /// The queue it waits in
    #[arg(long, default_value = "default")]
    queue: String,
    /// Its input, as JSON (at most 1 MiB), like '{"command": "echo hi"}' for shell
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// Run at this time (RFC 3339).
    #[arg(long, conflicts_with = "in_")]
    at: Option<String>,
    /// Run after this long (e.g. 5m).
    #[arg(long = "in", id = "in_")]
    in_: Option<String>,
    /// Higher runs first (negative numbers run after the default 0)
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_name = "N"
    )]
    priority: i32,
    /// Attempts before the task is dead (retries back off exponentially)
    #[arg(long, default_value_t = sked_core::DEFAULT_MAX_ATTEMPTS, value_name = "N")]
    max_attempts: i32,
    /// Execution deadline of one attempt (e.g. 30s).
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// While an unfinished task holds this key, adding another returns that task's id
    #[arg(long, value_name = "KEY")]
    unique_key: Option<String>,
}

pub(crate) async fn task(cmd: TaskCmd, remote: &Remote) -> CliResult {
    let client = connect(remote)?;
    match cmd {
        TaskCmd::Add(a) => {
            let now = jiff::Timestamp::now();
            let mut task = NewTask::new(a.kind)
                .queue(a.queue)
                .payload(parse_payload(a.payload.as_deref())?)
                .priority(a.priority)
                .max_attempts(a.max_attempts);
            match (&a.at, &a.in_) {
                (Some(at), _) => {
                    task = task.run_at(sked_core::parse_time(at, now).map_err(CliError::usage)?)
                }
                (None, Some(d)) => {
                    let d = sked_core::parse_duration(d).map_err(CliError::usage)?;
                    task = task.run_at(now.checked_add(d).map_err(CliError::usage)?);
                }
                (None, None) => {}
            }
            if let Some(t) = &a.timeout {
                task = task.timeout(flag_duration("--timeout", t)?);
            }
            if let Some(k) = a.unique_key {
                task = task.unique_key(k);
            }
            let inserted = client.enqueue(task).await.map_err(failed)?;
            show(remote, &inserted, |t| out!("{}", t.id));
        }
        TaskCmd::Get { id } => {
            let task = client.task(task_id(&id)?).await.map_err(failed)?;
            show(remote, &task, print_task);
        }
        TaskCmd::Ls {
            state,
            queue,
            kind,
            schedule,
            limit,
        } => {
            let mut filter = TaskFilter::new().limit(limit);
            for s in &state {
                filter = filter.state(TaskState::parse(s).map_err(CliError::usage)?);
            }
            filter.queue = queue;
            filter.kind = kind;
            filter.schedule = schedule;
            let tasks = client.tasks(filter).await.map_err(failed)?;
            show(remote, &TaskList { tasks }, |list| {
                let rows = list
                    .tasks
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.to_string(),
                            t.queue.clone(),
                            t.kind.clone(),
                            t.state.to_string(),
                            t.priority.to_string(),
                            format!("{}/{}", t.attempt, t.max_attempts),
                            time(Some(t.run_at)),
                            opt(t.last_error.as_ref()),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "ID",
                        "QUEUE",
                        "KIND",
                        "STATE",
                        "PRI",
                        "ATTEMPT",
                        "RUN AT",
                        "LAST ERROR",
                    ],
                    rows,
                );
            });
        }
        TaskCmd::Cancel { id } => {
            let task = client.cancel(task_id(&id)?).await.map_err(failed)?;
            show(remote, &task, print_state);
        }
        TaskCmd::Retry { id } => {
            let task = client.retry(task_id(&id)?).await.map_err(failed)?;
            show(remote, &task, print_state);
        }
        TaskCmd::Import { file, batch } => import(&client, &file, batch, remote).await?,
        TaskCmd::Reschedule { id, at } => {
            let run_at =
                sked_core::parse_time(&at, jiff::Timestamp::now()).map_err(CliError::usage)?;
            let task = client
                .reschedule(task_id(&id)?, run_at)
                .await
                .map_err(failed)?;
            show(remote, &task, print_state);
        }
    }
    Ok(())
}

/// A task's fields, payload, result and attempts, for `sked task get`.
fn print_task(t: &Task) {
    let fields = [
        ("id", t.id.to_string()),
        ("kind", t.kind.clone()),
        ("queue", t.queue.clone()),
        ("state", t.state.to_string()),
        ("priority", t.priority.to_string()),
        ("attempt", t.attempt.to_string()),
        ("max_attempts", t.max_attempts.to_string()),
        ("run_at", time(Some(t.run_at))),
        ("created_at", time(Some(t.created_at))),
        ("started_at", time(t.started_at)),
        ("finished_at", time(t.finished_at)),
        ("worker", opt(t.worker.as_ref())),
        ("schedule", opt(t.schedule.as_ref())),
        ("nominal_at", time(t.nominal_at)),
        ("last_error", opt(t.last_error.as_ref())),
    ];
    crate::output::fields(&fields);
    out!("payload       {}", t.payload);
    if let Some(result) = &t.result {
        out!("result        {result}");
    }
    if !t.attempts.is_empty() {
        out!();
        table(
            &[
                "ATTEMPT", "WORKER", "STARTED", "FINISHED", "OUTCOME", "ERROR",
            ],
            t.attempts
                .iter()
                .map(|a| {
                    vec![
                        a.attempt.to_string(),
                        a.worker.clone(),
                        time(Some(a.started_at)),
                        time(a.finished_at),
                        a.outcome.clone(),
                        opt(a.error.as_ref()),
                    ]
                })
                .collect(),
        );
    }
}

/// A task's id and new state, after a state change.
fn print_state(t: &Task) {
    let extra = if t.cancel_requested && t.state == TaskState::Running {
        " (cancel requested)"
    } else {
        ""
    };
    out!("{} {}{extra}", t.id, t.state);
}

/// Requests stay well under the server's 2 MiB body limit.
const IMPORT_BATCH_BYTES: usize = 1536 * 1024;

/// `sked task import`: check every line, then enqueue in batches with a progress bar.
async fn import(client: &Client, file: &str, batch: usize, remote: &Remote) -> CliResult {
    use std::io::Read;
    if batch == 0 || batch > 1000 {
        return Err(CliError::usage("--batch must be between 1 and 1000"));
    }
    let mut text = String::new();
    let read = if file == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::File::open(file).and_then(|mut f| f.read_to_string(&mut text).map(|_| ()))
    };
    read.map_err(|e| CliError::usage(format!("cannot read {file}: {e}")))?;
    // Every line first: a bad one enqueues nothing.
    let mut tasks: Vec<(NewTask, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |e: &dyn std::fmt::Display| CliError::usage(format!("{file}:{}: {e}", i + 1));
        let task: NewTask = serde_json::from_str(line).map_err(|e| bad(&e))?;
        task.validate().map_err(|e| bad(&e))?;
        tasks.push((task, line.len()));
    }
    let started = std::time::Instant::now();
    let bar = indicatif::ProgressBar::new(tasks.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} tasks  {per_sec}  eta {eta}")
            .expect("a valid template"),
    );
    let (mut created, mut duplicates) = (0u64, 0u64);
    let mut rest = &tasks[..];
    while !rest.is_empty() {
        // As many as fit in one request, at least one.
        let mut n = 0;
        let mut bytes = 0;
        while n < rest.len() && n < batch && (n == 0 || bytes + rest[n].1 < IMPORT_BATCH_BYTES) {
            bytes += rest[n].1;
            n += 1;
        }
        let chunk: Vec<NewTask> = rest[..n].iter().map(|(t, _)| t.clone()).collect();
        let inserted = client.enqueue_many(chunk).await.map_err(|e| {
            bar.abandon();
            let done = created + duplicates;
            let msg = format!("{e} (the first {done} tasks were enqueued)");
            match failed(e) {
                CliError::Usage(_) => CliError::Usage(msg),
                CliError::Runtime(_) => CliError::Runtime(msg),
            }
        })?;
        for t in inserted {
            if t.duplicate {
                duplicates += 1;
            } else {
                created += 1;
            }
        }
        bar.inc(n as u64);
        rest = &rest[n..];
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let report = ImportReport {
        imported: created,
        duplicates,
        seconds: (secs * 1000.0).round() / 1000.0,
    };
    show(remote, &report, |_| {
        out!("imported {created} tasks ({duplicates} already there by unique key) in {secs:.2}s")
    });
    Ok(())
}

#[derive(Subcommand)]
pub(crate) enum ScheduleCmd {
    /// Create or replace a schedule.
    Add(Box<ScheduleAdd>),
    /// List schedules: next fire, last start and stop, running, last outcome.
    Ls,
    /// Show a schedule and its recent occurrences.
    Get {
        /// The schedule's name
        name: String,
    },
    /// Pause a schedule: nothing fires until it is resumed.
    Pause {
        /// The schedule's name
        name: String,
    },
    /// Resume a paused schedule from now (the paused time is not caught up).
    Resume {
        /// The schedule's name
        name: String,
    },
    /// Enqueue a run now.
    Trigger {
        /// The schedule's name
        name: String,
    },
    /// Remove a schedule (its tasks stay).
    Rm {
        /// The schedule's name
        name: String,
    },
}

/// Task states, as `--state` accepts them.
const STATES: [&str; 7] = [
    "scheduled",
    "available",
    "running",
    "retrying",
    "succeeded",
    "dead",
    "cancelled",
];

#[derive(Args)]
pub(crate) struct ScheduleAdd {
    /// The schedule's name (a new name creates it, an existing one replaces it)
    name: String,
    /// Cron expression (5 or 6 fields, or a macro like @daily).
    #[arg(long, group = "when", value_name = "EXPR")]
    cron: Option<String>,
    /// Interval (e.g. 90s).
    #[arg(long, group = "when", value_name = "DUR")]
    every: Option<String>,
    /// IANA time zone.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// The kind of task each occurrence enqueues
    #[arg(long, required_unless_present = "shell")]
    kind: Option<String>,
    /// Shorthand for --kind shell --payload '{"command": CMD}'.
    #[arg(long, conflicts_with_all = ["kind", "payload"], value_name = "CMD")]
    shell: Option<String>,
    /// The tasks' input, as JSON
    #[arg(long, value_name = "JSON")]
    payload: Option<String>,
    /// The queue the tasks wait in
    #[arg(long, default_value = "default")]
    queue: String,
    /// The tasks' priority: higher runs first
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_name = "N"
    )]
    priority: i32,
    /// Attempts per run before it is dead
    #[arg(long, default_value_t = sked_core::DEFAULT_MAX_ATTEMPTS, value_name = "N")]
    max_attempts: i32,
    /// Execution deadline of one attempt (e.g. 30s)
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// When an occurrence comes while a run is unfinished: skip it, allow both, buffer one
    /// until the run ends, or replace (cancel) the run
    #[arg(long, default_value = "skip", value_parser = ["skip", "allow", "buffer_one", "replace"])]
    overlap: String,
    /// Occurrences missed while nothing ran (downtime): run the latest one, all of them, or
    /// none
    #[arg(long, default_value = "latest", value_parser = ["latest", "all", "none"])]
    catchup: String,
    /// How far back missed occurrences are caught up
    #[arg(long, default_value = "1h", value_name = "DUR")]
    catchup_window: String,
}

/// A policy flag's value, read as the API reads it.
fn policy<T: serde::de::DeserializeOwned>(flag: &str, v: &str) -> CliResult<T> {
    serde_json::from_value(serde_json::Value::String(v.to_string()))
        .map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
}

pub(crate) async fn schedule(cmd: ScheduleCmd, remote: &Remote) -> CliResult {
    match cmd {
        ScheduleCmd::Add(a) => {
            let spec = match (&a.cron, &a.every) {
                (Some(c), None) => c.clone(),
                (None, Some(e)) => format!("every {e}"),
                _ => {
                    return Err(CliError::usage(
                        "give exactly one of --cron EXPR or --every DUR",
                    ));
                }
            };
            let mut task = match &a.shell {
                Some(cmd) => {
                    TaskTemplate::new("shell").payload(serde_json::json!({ "command": cmd }))
                }
                None => TaskTemplate::new(a.kind.clone().unwrap_or_default())
                    .payload(parse_payload(a.payload.as_deref())?),
            };
            task = task
                .queue(a.queue.clone())
                .priority(a.priority)
                .max_attempts(a.max_attempts);
            if let Some(t) = &a.timeout {
                task = task.timeout(flag_duration("--timeout", t)?);
            }
            let def = ScheduleDef::new(a.name.clone(), spec, task)
                .tz(a.tz.clone())
                .overlap(policy("--overlap", &a.overlap)?)
                .catchup(
                    policy("--catchup", &a.catchup)?,
                    flag_duration("--catchup-window", &a.catchup_window)?,
                );
            // Check locally first, so bad input is reported even without a server.
            def.validate().map_err(CliError::usage)?;
            let s = connect(remote)?.schedule_put(def).await.map_err(failed)?;
            show(remote, &s, |s| {
                out!("{} next fire {}", s.name, time_in(s.next_fire_at, &s.tz))
            });
        }
        ScheduleCmd::Ls => {
            let schedules = connect(remote)?.schedules().await.map_err(failed)?;
            show(remote, &ScheduleList { schedules }, |list| {
                let rows = list
                    .schedules
                    .iter()
                    .map(|s| {
                        vec![
                            s.name.clone(),
                            s.spec.clone(),
                            s.tz.clone(),
                            if s.paused {
                                "paused".into()
                            } else {
                                time_in(s.next_fire_at, &s.tz)
                            },
                            time(s.last_started_at),
                            time(s.last_finished_at),
                            if s.running { "yes" } else { "no" }.into(),
                            opt(s.last_outcome.as_ref()),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "NAME",
                        "SPEC",
                        "TZ",
                        "NEXT FIRE",
                        "LAST START",
                        "LAST STOP",
                        "RUNNING",
                        "LAST OUTCOME",
                    ],
                    rows,
                );
            });
        }
        ScheduleCmd::Get { name } => {
            let client = connect(remote)?;
            let (schedule, occurrences) =
                tokio::try_join!(client.schedule(&name), client.occurrences(&name, 20))
                    .map_err(failed)?;
            let detail = ScheduleDetail {
                schedule,
                occurrences,
            };
            show(remote, &detail, print_schedule);
        }
        ScheduleCmd::Pause { name } => {
            let s = connect(remote)?
                .schedule_pause(&name)
                .await
                .map_err(failed)?;
            show(remote, &s, print_paused);
        }
        ScheduleCmd::Resume { name } => {
            let s = connect(remote)?
                .schedule_resume(&name)
                .await
                .map_err(failed)?;
            show(remote, &s, print_paused);
        }
        ScheduleCmd::Trigger { name } => {
            let id = connect(remote)?
                .schedule_trigger(&name)
                .await
                .map_err(failed)?;
            show(remote, &Triggered { id }, |t| out!("{}", t.id));
        }
        ScheduleCmd::Rm { name } => {
            connect(remote)?
                .schedule_delete(&name)
                .await
                .map_err(failed)?;
            // The API answers 204 without a body: `--json` prints nothing either.
            if !remote.json {
                out!("removed {name}");
            }
        }
    }
    Ok(())
}

/// A schedule's fields and its recent occurrences, for `sked schedule get`.
fn print_schedule(d: &ScheduleDetail) {
    let s = &d.schedule;
    let fields = [
        ("name", s.name.clone()),
        ("spec", s.spec.clone()),
        ("tz", s.tz.clone()),
        ("overlap", s.overlap.as_str().to_string()),
        ("catchup", s.catchup.as_str().to_string()),
        (
            "catchup_window",
            sked_core::format_duration(s.catchup_window),
        ),
        ("paused", s.paused.to_string()),
        ("next_fire_at", time(s.next_fire_at)),
        ("last_started_at", time(s.last_started_at)),
        ("last_finished_at", time(s.last_finished_at)),
        ("running", s.running.to_string()),
        ("last_outcome", opt(s.last_outcome.as_ref())),
    ];
    crate::output::fields(&fields);
    out!(
        "task               {}",
        serde_json::to_string(&s.task).unwrap_or_default()
    );
    out!();
    let rows = d
        .occurrences
        .iter()
        .map(|o| {
            vec![
                time(Some(o.nominal_at)),
                o.outcome.as_str().to_string(),
                opt(o.task_id.as_ref()),
                opt(o.task_state.as_ref()),
                opt(o.detail.as_ref()),
            ]
        })
        .collect();
    table(
        &["NOMINAL", "OUTCOME", "TASK", "TASK STATE", "DETAIL"],
        rows,
    );
}

/// A schedule's name and whether it is paused or when it fires next.
fn print_paused(s: &sked::api::ScheduleView) {
    let state = if s.paused {
        "paused".to_string()
    } else {
        format!("next fire {}", time_in(s.next_fire_at, &s.tz))
    };
    out!("{} {state}", s.name);
}

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
            show(remote, &QueueList { queues }, |list| {
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
            });
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
