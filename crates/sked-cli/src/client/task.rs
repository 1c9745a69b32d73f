//! `sked task …`: enqueue, list, inspect and act on tasks; import them in bulk.

use clap::{Args, Subcommand};
use sked::api::ImportReport;
use sked::store::{BulkAction, HeldBy};
use sked::{Client, NewTask, Task, TaskFilter, TaskState};

use crate::output::{opt, table, time};
use crate::{CliError, CliResult, Remote};

use super::{STATES, connect, failed, flag_duration, parse_payload, show, task_id};

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
        /// Only tasks of this concurrency key
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
        /// Only tasks of this unique key
        #[arg(long, value_name = "KEY")]
        unique_key: Option<String>,
        /// Only tasks of this workflow
        #[arg(long, value_name = "ID")]
        workflow: Option<i64>,
        /// Only tasks enqueued at or after this time (RFC 3339, or relative like -1h)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        since: Option<String>,
        /// Only tasks enqueued before this time (RFC 3339, or relative like -10m)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        until: Option<String>,
        /// At most this many (1 to 1000)
        #[arg(long, default_value_t = 50, value_name = "N")]
        limit: u32,
        /// Only tasks older than this id: the next page
        #[arg(long, value_name = "ID")]
        before: Option<i64>,
    },
    /// Cancel a task, or every task a filter matches (a running one is told at its next
    /// heartbeat): `sked task cancel ID`, `sked task cancel --queue Q --state available`.
    Cancel(super::bulk::Target),
    /// Delete a task that has ended, with its attempts, or every ended task a filter matches:
    /// `sked task rm ID`, `sked task rm --state succeeded --queue Q --before -1d`.
    Rm(super::bulk::Target),
    /// Run a finished task again, or every task a filter matches: `sked task retry ID`,
    /// `sked task retry --state dead --queue Q`. A task that succeeded runs again only when
    /// confirmed: at a prompt, or with --yes.
    Retry {
        #[command(flatten)]
        target: super::bulk::Target,
        /// With a task id: run a task that succeeded again without asking
        #[arg(long, requires = "id")]
        yes: bool,
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
    /// Wait until a task has ended: exit 0 when it succeeded, 1 when it ended dead,
    /// cancelled or expired, 3 when --timeout passed first
    Wait {
        /// The task's id
        id: String,
        /// How long to wait at most (e.g. 1m)
        #[arg(long, default_value = "1h", value_name = "DUR")]
        timeout: String,
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
    #[arg(long = "in", id = "in_", value_name = "DUR")]
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
    #[arg(
        long,
        default_value_t = sked_core::DEFAULT_MAX_ATTEMPTS,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    max_attempts: i32,
    /// Execution deadline of one attempt (e.g. 30s).
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// How long retries wait: exp:BASE..MAX (BASE doubling up to MAX, ±20 %), fixed:D,
    /// linear:STEP..MAX (STEP times the attempt, up to MAX) or a list like 10s,1m,10m,1h (the
    /// last repeats) [default: exp:10s..6h]
    #[arg(long, value_name = "SHAPE")]
    backoff: Option<String>,
    /// Its deadline to start, counted from its run time (e.g. 30m): not started by then, it
    /// ends expired and never runs
    #[arg(
        long,
        value_name = "DUR",
        allow_hyphen_values = true,
        conflicts_with = "expires_at"
    )]
    ttl: Option<String>,
    /// Its deadline to start, as a time (as --at takes it): not started by then, it ends
    /// expired and never runs
    #[arg(long, value_name = "TIME")]
    expires_at: Option<String>,
    /// While an unfinished task holds this key, adding another returns that task's id
    #[arg(long, value_name = "KEY")]
    unique_key: Option<String>,
    /// With --unique-key: hold the key this long after adding, finished or not, and no longer
    /// (e.g. 10m)
    #[arg(
        long,
        value_name = "DUR",
        requires = "unique_key",
        conflicts_with = "debounce"
    )]
    unique_for: Option<String>,
    /// With --unique-key: run once the key has been quiet this long; adding again before the
    /// task starts replaces its payload and moves it (e.g. 30s)
    #[arg(long, value_name = "DUR", requires = "unique_key")]
    debounce: Option<String>,
    /// A concurrency key (a tenant, say): the queue's per-key limit caps how many tasks of
    /// one key run at once, and keys take turns
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// Wait until these tasks have succeeded (their ids): the task is waiting until then
    #[arg(long, value_delimiter = ',', value_name = "ID,ID")]
    after: Vec<String>,
    /// With --after: when a task it waits for ends dead or cancelled, cancel this one too
    /// (cancel, the default) or run it anyway (run)
    #[arg(long, value_name = "cancel|run", requires = "after")]
    on_parent_failure: Option<String>,
    /// Join this batch (sked batch open): its callbacks wait for this task
    #[arg(long, value_name = "ID")]
    batch: Option<i64>,
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
            if let Some(b) = &a.backoff {
                let shape = b
                    .parse()
                    .map_err(|e| CliError::usage(format!("invalid --backoff: {e}")))?;
                task = task.backoff_shape(shape);
            }
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
            if let Some(d) = &a.ttl {
                task = task.ttl(
                    sked_core::parse_duration(d)
                        .map_err(|e| CliError::usage(format!("invalid --ttl: {e}")))?,
                );
            }
            if let Some(at) = &a.expires_at {
                let at = sked_core::parse_time(at, now)
                    .map_err(|e| CliError::usage(format!("invalid --expires-at: {e}")))?;
                task = task.expires_at(at);
            }
            if let Some(k) = &a.unique_key {
                task = task.unique_key(k.clone());
            }
            if let Some(d) = &a.unique_for {
                task = task.unique_for(flag_duration("--unique-for", d)?);
            }
            if let Some(d) = &a.debounce {
                task = task.debounce(flag_duration("--debounce", d)?);
            }
            if let Some(k) = a.key {
                task = task.key(k);
            }
            let parents = a.after.iter().map(|id| {
                task_id(id).map_err(|_| {
                    CliError::usage(format!("invalid --after {id:?}: task ids are integers"))
                })
            });
            task = task.after(parents.collect::<CliResult<Vec<_>>>()?);
            if let Some(then) = &a.on_parent_failure {
                let then = sked_core::ParentFailure::parse(then)
                    .map_err(|e| CliError::usage(format!("invalid --on-parent-failure: {e}")))?;
                task = task.on_parent_failure(then);
            }
            task.batch = a.batch;
            task.validate_fields().map_err(CliError::usage)?;
            task.deadline(now).map_err(CliError::usage)?;
            let inserted = client.enqueue(task).await.map_err(failed)?;
            // A duplicate is no new task: say so, naming the key, so the new payload is not
            // thought queued.
            let key = a.unique_key.unwrap_or_default();
            show(remote, &inserted, |t| match (t.duplicate, t.debounced) {
                (_, true) => out!(
                    "{} (debounced: the waiting task took this payload and run time)",
                    t.id
                ),
                (true, false) => out!("{} (already enqueued: unique key {key})", t.id),
                (false, false) => out!("{}", t.id),
            });
        }
        TaskCmd::Get { id } => {
            let task = client.task(task_id(&id)?).await.map_err(failed)?;
            // Why a task that could start waits: its queue's limits, or its key's.
            let waiting = match (remote.json, task.state) {
                (false, TaskState::Available) => client
                    .task_held(task.id)
                    .await
                    .map_err(failed)?
                    .map(|h| match h.by {
                        HeldBy::PerKey | HeldBy::PerKeyRate | HeldBy::KeyOrder => format!(
                            "key {} of queue {}: {}",
                            task.key.as_deref().unwrap_or("-"),
                            task.queue,
                            super::queue::held_text(h)
                        ),
                        _ => format!("queue {}: {}", task.queue, super::queue::held_text(h)),
                    }),
                _ => None,
            };
            show(remote, &task, |t| {
                print_task(t);
                if let Some(why) = &waiting {
                    out!("waiting       held by {why}");
                }
            });
        }
        TaskCmd::Ls {
            state,
            queue,
            kind,
            schedule,
            key,
            unique_key,
            workflow,
            since,
            until,
            limit,
            before,
        } => {
            let mut filter = TaskFilter::new().limit(limit);
            let now = jiff::Timestamp::now();
            let at = |flag: &str, v: &Option<String>| {
                v.as_deref()
                    .map(|v| sked_core::parse_time(v, now))
                    .transpose()
                    .map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
            };
            filter.since = at("--since", &since)?;
            filter.until = at("--until", &until)?;
            filter.key = key;
            filter.unique_key = unique_key;
            filter.workflow = workflow;
            for s in &state {
                filter = filter.state(TaskState::parse(s).map_err(CliError::usage)?);
            }
            filter.queue = queue;
            filter.kind = kind;
            filter.schedule = schedule;
            filter.before = before;
            let page = client.task_page(filter).await.map_err(failed)?;
            if let (Some(next), false) = (page.next_before, remote.json) {
                eprintln!("more tasks match: add --before {next} for the next page");
            }
            show(remote, &page, |list| {
                let rows = list
                    .tasks
                    .iter()
                    .map(|t| {
                        vec![
                            t.id.to_string(),
                            t.queue.clone(),
                            t.kind.clone(),
                            state_text(t),
                            t.priority.to_string(),
                            format!("{}/{}", t.attempt, t.max_attempts),
                            time(Some(t.run_at)),
                            error_of(t),
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
        TaskCmd::Cancel(t) => match super::bulk::single(&t)? {
            Some(id) => {
                let task = client.cancel(id).await.map_err(failed)?;
                show(remote, &task, print_state);
            }
            None => super::bulk::run(&client, BulkAction::Cancel, t, remote).await?,
        },
        TaskCmd::Rm(t) => match super::bulk::single(&t)? {
            Some(id) => {
                client.task_delete(id).await.map_err(failed)?;
                if !remote.json {
                    out!("task {id} deleted");
                }
            }
            None => super::bulk::run(&client, BulkAction::Delete, t, remote).await?,
        },
        TaskCmd::Retry { target, yes } => match super::bulk::single(&target)? {
            Some(id) => {
                if !yes {
                    let task = client.task(id).await.map_err(failed)?;
                    if task.state == TaskState::Succeeded {
                        confirm_run_again(&task)?;
                    }
                }
                let task = client.retry(id).await.map_err(failed)?;
                show(remote, &task, print_state);
            }
            None => super::bulk::run(&client, BulkAction::Retry, target, remote).await?,
        },
        TaskCmd::Import { file, batch } => import(&client, &file, batch, remote).await?,
        TaskCmd::Wait { id, timeout } => {
            let id = task_id(&id)?;
            let limit = flag_duration("--timeout", &timeout)?;
            let limit = std::time::Duration::try_from(limit)
                .map_err(|_| CliError::usage("invalid --timeout: it must not be negative"))?;
            let task = wait_for_end(&client, id, limit).await?;
            show(remote, &task, print_state);
            match task.state {
                TaskState::Succeeded => {}
                s if s.is_finished() => {
                    let why = task.last_error.as_deref().unwrap_or("no error recorded");
                    return Err(CliError::Exit(1, format!("task {id} ended {s}: {why}")));
                }
                s => {
                    return Err(CliError::Exit(
                        3,
                        format!("task {id} is still {s} after {timeout}"),
                    ));
                }
            }
        }
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

/// The task once it ended, or as it is after `limit`: long-polls of at most
/// [`WAIT_STEP`] each, so that no request outlasts a server's `--max-wait` or a proxy's idle
/// timeout.
async fn wait_for_end(
    client: &sked::Client,
    id: sked_core::TaskId,
    limit: std::time::Duration,
) -> CliResult<Task> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let task = client
            .task_wait(id, left.min(WAIT_STEP))
            .await
            .map_err(failed)?;
        if task.state.is_finished() || left <= WAIT_STEP {
            return Ok(task);
        }
    }
}

/// The longest one request of `task wait` holds.
pub(super) const WAIT_STEP: std::time::Duration = std::time::Duration::from_secs(30);

/// Asks, on a terminal, whether a task that succeeded should run again; elsewhere refuses,
/// naming `--yes`. A success run twice by accident is work done twice.
fn confirm_run_again(task: &Task) -> CliResult {
    use std::io::{BufRead, IsTerminal, Write};
    let done = format!("task {} succeeded at {}", task.id, time(task.finished_at));
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::usage(format!(
            "{done}; retrying runs it again: add --yes to do so"
        )));
    }
    eprint!("{done}. Run it again? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| CliError::runtime(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(CliError::runtime(format!("not retried: {done}"))),
    }
}

/// The error of a task: `-` when it succeeded (an earlier attempt's error is history, kept in
/// its attempts, not a failure).
fn error_of(t: &Task) -> String {
    match t.state {
        TaskState::Succeeded => "-".into(),
        _ => opt(t.last_error.as_ref()),
    }
}

/// A task's fields, payload, result and attempts, for `sked task get`.
/// A task's state as people read it: a waiting task says what it waits for.
fn state_text(t: &Task) -> String {
    match (t.state, t.waiting_for.as_slice()) {
        (TaskState::Waiting, [_, ..]) => format!("waiting for {}", ids(&t.waiting_for)),
        _ => t.state.to_string(),
    }
}

/// A progress as people read it: `42%`, or the JSON a handler reported.
fn progress_text(progress: &serde_json::Value) -> String {
    match progress.as_f64() {
        Some(p) => format!("{p}%"),
        None => progress.to_string(),
    }
}

/// Task ids as a list: `12, 13`.
fn ids(ids: &[sked_core::TaskId]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    ids.join(", ")
}

fn print_task(t: &Task) {
    let fields = [
        ("id", t.id.to_string()),
        ("kind", t.kind.clone()),
        ("queue", t.queue.clone()),
        ("key", opt(t.key.as_ref())),
        ("state", state_text(t)),
        ("priority", t.priority.to_string()),
        ("attempt", t.attempt.to_string()),
        ("max_attempts", t.max_attempts.to_string()),
        ("run_at", time(Some(t.run_at))),
        ("expires_at", time(t.expires_at)),
        ("created_at", time(Some(t.created_at))),
        ("started_at", time(t.started_at)),
        ("finished_at", time(t.finished_at)),
        ("worker", opt(t.worker.as_ref())),
        ("schedule", opt(t.schedule.as_ref())),
        ("nominal_at", time(t.nominal_at)),
        match (t.state, &t.last_error) {
            (TaskState::Succeeded, Some(e)) => ("earlier_error", e.clone()),
            _ => ("last_error", opt(t.last_error.as_ref())),
        },
    ];
    let mut fields = fields.to_vec();
    if let Some(w) = &t.workflow {
        fields.push(("workflow", format!("{} ({})", w.id, w.name)));
    }
    if let Some(b) = t.batch {
        fields.push(("batch", b.to_string()));
    }
    // Only for tasks that wait for others, or that others wait for.
    if !t.depends_on.is_empty() {
        fields.push(("depends_on", ids(&t.depends_on)));
        if !t.on_parent_failure.is_cancel() {
            fields.push(("on_parent_failure", t.on_parent_failure.as_str().into()));
        }
    }
    if !t.dependents.is_empty() {
        fields.push(("dependents", ids(&t.dependents)));
    }
    if let Some(progress) = &t.progress {
        fields.push(("progress", progress_text(progress)));
    }
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
                CliError::Runtime(_) | CliError::Exit(..) => CliError::Runtime(msg),
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
