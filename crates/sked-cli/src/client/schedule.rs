//! `sked schedule …`: declare, inspect, pause, resume, trigger and remove schedules.

use clap::{Args, Subcommand};
use sked::api::{ScheduleDetail, ScheduleList, Triggered};
use sked::{ScheduleDef, TaskTemplate};

use crate::output::{opt, table, time_in};
use crate::{CliError, CliResult, Remote};

use super::{connect, failed, flag_duration, parse_payload, show};

#[derive(Subcommand)]
pub(crate) enum ScheduleCmd {
    /// Create or replace a schedule.
    Add(Box<ScheduleAdd>),
    /// List schedules by name, a page at a time: next fire, last start and stop, running,
    /// last outcome.
    Ls(ScheduleLs),
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
    /// Enqueue each past occurrence in a range that has no run yet (each occurrence still runs
    /// at most once).
    Backfill {
        /// The schedule's name
        name: String,
        /// The first occurrence's time (RFC 3339, or relative like -2h)
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        from: String,
        /// The last occurrence's time (RFC 3339, or relative), not later than now
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        to: String,
    },
    /// Enqueue a run now.
    Trigger {
        /// The schedule's name
        name: String,
    },
    /// Write the schedules of a file (JSON or YAML) in one go: all of them, or none when one
    /// is invalid
    Apply(super::apply::ScheduleApply),
    /// Remove a schedule (its tasks stay).
    Rm {
        /// The schedule's name
        name: String,
    },
}

#[derive(Args)]
pub(crate) struct ScheduleLs {
    /// Only schedules whose name starts with this
    #[arg(long, value_name = "P")]
    prefix: Option<String>,
    /// Only paused schedules
    #[arg(long, conflicts_with = "active")]
    paused: bool,
    /// Only schedules that are not paused
    #[arg(long)]
    active: bool,
    /// Only failing schedules: a run waiting to retry, or the last run dead
    #[arg(long)]
    failing: bool,
    /// At most this many (up to 1000)
    #[arg(long, default_value_t = 1000, value_name = "N")]
    limit: u32,
    /// Start after this name (the name a previous page said to go on from)
    #[arg(long, value_name = "NAME")]
    after: Option<String>,
}

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
    #[arg(long, required_unless_present_any = ["shell", "workflow"])]
    kind: Option<String>,
    /// Shorthand for --kind shell --payload '{"command": CMD}'.
    #[arg(long, conflicts_with_all = ["kind", "payload"], value_name = "CMD")]
    shell: Option<String>,
    /// Start the workflow of this file (JSON or YAML, as `sked workflow add` reads it) at each
    /// occurrence, instead of one task; the overlap policy counts whole runs
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["kind", "shell", "payload", "queue", "priority", "max_attempts", "timeout", "key", "backoff", "run_ttl"]
    )]
    workflow: Option<std::path::PathBuf>,
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
    #[arg(
        long,
        default_value_t = sked_core::DEFAULT_MAX_ATTEMPTS,
        allow_negative_numbers = true,
        value_name = "N"
    )]
    max_attempts: i32,
    /// Execution deadline of one attempt (e.g. 30s)
    #[arg(long, value_name = "DUR")]
    timeout: Option<String>,
    /// The runs' concurrency key (see `sked task add --key`)
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// How long the runs' retries wait (see `sked task add --backoff`: exp:BASE..MAX, fixed:D,
    /// linear:STEP..MAX or a list like 10s,1m,10m)
    #[arg(long, value_name = "SHAPE")]
    backoff: Option<String>,
    /// Each run's deadline to start, counted from its occurrence's time (e.g. 30m): a run not
    /// started by then ends expired and never runs (a workflow file gives each task a ttl)
    #[arg(long, value_name = "DUR", allow_hyphen_values = true)]
    run_ttl: Option<String>,
    /// When an occurrence comes while a run is unfinished: skip it, allow both, allow:N (at
    /// most N at once, the rest skipped), buffer_one until the run ends, or replace (cancel)
    /// the run
    #[arg(long, default_value = "skip", value_name = "POLICY")]
    overlap: String,
    /// Where an interval counts from: a fixed grid, or the previous run's start or end
    #[arg(long, default_value = "fixed", value_parser = ["fixed", "last-start", "last-finish"], requires = "every")]
    from: String,
    /// Move each run later by a stable pseudo-random offset below this (e.g. 30s), the same
    /// on every node
    #[arg(long, value_name = "DUR")]
    jitter: Option<String>,
    /// How a job at a fixed hour and minute meets DST changes: debian (a skipped wall time
    /// runs after the gap, a repeated one once), skip (a skipped one does not run) or twice
    /// (a repeated one runs at both instants)
    #[arg(long, default_value = "debian", value_parser = ["debian", "skip", "twice"], requires = "cron")]
    dst: String,
    /// Pause the schedule, saying why, once this many runs in a row ended dead
    #[arg(long, value_name = "N")]
    pause_after_failures: Option<u32>,
    /// Let a failed run retry past the next occurrence (by default its retries end when the
    /// next occurrence is planned, so that every occurrence gets a run)
    #[arg(long)]
    keep_retrying: bool,
    /// Occurrences missed while nothing ran (downtime): run the latest one, all of them, or
    /// none
    #[arg(long, default_value = "latest", value_parser = ["latest", "all", "none"])]
    catchup: String,
    /// How far back missed occurrences are caught up
    #[arg(long, default_value = "1h", value_name = "DUR")]
    catchup_window: String,
    /// No occurrence before this time (RFC 3339, or relative: +2h); an interval counts from it
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    start_at: Option<String>,
    /// No occurrence after this time (RFC 3339, or relative: +30d): the schedule ends there
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    end_at: Option<String>,
    /// End the schedule once it has made this many runs at its occurrences (runs triggered by
    /// hand or backfilled are not counted)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_runs: Option<i64>,
    /// Do not fire on the dates of this calendar (`sked calendar add`); repeat for more: each
    /// occurrence on one is recorded as excluded, naming it
    #[arg(long, value_name = "NAME")]
    skip_calendar: Vec<String>,
}

/// The task each occurrence enqueues, from the flags.
fn task_template(a: &ScheduleAdd) -> CliResult<TaskTemplate> {
    let mut task = match &a.shell {
        Some(cmd) => TaskTemplate::new("shell").payload(serde_json::json!({ "command": cmd })),
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
    if let Some(k) = &a.key {
        task = task.key(k.clone());
    }
    if let Some(b) = &a.backoff {
        let shape = b
            .parse()
            .map_err(|e| CliError::usage(format!("invalid --backoff: {e}")))?;
        task = task.backoff(shape);
    }
    if let Some(d) = &a.run_ttl {
        task = task.ttl(
            sked_core::parse_duration(d)
                .map_err(|e| CliError::usage(format!("invalid --run-ttl: {e}")))?,
        );
    }
    Ok(task)
}

/// A time flag's value: RFC 3339, or relative to `now`.
fn flag_time(flag: &str, v: &str, now: jiff::Timestamp) -> CliResult<jiff::Timestamp> {
    sked_core::parse_time(v, now).map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
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
            let def = match &a.workflow {
                Some(file) => {
                    let value = crate::schedule_file::read_value("--workflow", file)?;
                    let workflow = serde_json::from_value(value).map_err(|e| {
                        CliError::usage(format!("invalid --workflow {}: {e}", file.display()))
                    })?;
                    ScheduleDef::for_workflow(a.name.clone(), spec, workflow)
                }
                None => ScheduleDef::new(a.name.clone(), spec, task_template(&a)?),
            };
            let mut def = def
                .tz(a.tz.clone())
                .overlap(policy("--overlap", &a.overlap)?)
                .catchup(
                    policy("--catchup", &a.catchup)?,
                    flag_duration("--catchup-window", &a.catchup_window)?,
                )
                .from(policy("--from", &a.from.replace('-', "_"))?)
                .dst(policy("--dst", &a.dst)?);
            if let Some(j) = &a.jitter {
                def = def.jitter(flag_duration("--jitter", j)?);
            }
            if let Some(n) = a.pause_after_failures {
                def = def.pause_after_failures(n);
            }
            if a.keep_retrying {
                def = def.keep_retrying();
            }
            let now = jiff::Timestamp::now();
            if let Some(t) = &a.start_at {
                def = def.start_at(flag_time("--start-at", t, now)?);
            }
            if let Some(t) = &a.end_at {
                def = def.end_at(flag_time("--end-at", t, now)?);
            }
            if let Some(n) = a.max_runs {
                let n = u64::try_from(n).map_err(|_| {
                    CliError::usage(format!("invalid --max-runs {n}: it must be at least 1"))
                })?;
                def = def.max_runs(n);
            }
            for c in &a.skip_calendar {
                def = def.skip_calendar(c.clone());
            }
            // Check locally first, so bad input is reported even without a server.
            def.validate().map_err(CliError::usage)?;
            let s = connect(remote)?.schedule_put(def).await.map_err(failed)?;
            show(remote, &s, |s| {
                out!("{} next fire {}", s.name, time_in(s.next_fire_at, &s.tz))
            });
        }
        ScheduleCmd::Ls(l) => {
            if l.limit == 0 || l.limit > 1000 {
                return Err(CliError::usage("--limit must be 1 to 1000"));
            }
            let filter = sked::store::ScheduleFilter {
                prefix: l.prefix,
                paused: match (l.paused, l.active) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                failing: l.failing,
            };
            let list = connect(remote)?
                // The table leaves payloads out; `--json` is the API's page with them.
                .schedule_page(&filter, l.after.as_deref(), l.limit, remote.json, false)
                .await
                .map_err(failed)?;
            show(remote, &list, print_list);
        }
        ScheduleCmd::Get { name } => {
            let client = connect(remote)?;
            let (schedule, occurrences) =
                tokio::try_join!(client.schedule(&name), client.occurrences(&name, 20))
                    .map_err(failed)?;
            // The limits its runs meet in their queue (text only: `--json` is the schedule).
            let queue = match (remote.json, &schedule.task) {
                // A queue nothing has been enqueued to yet has no limits to show.
                (false, Some(task)) => match client.queue(&task.queue).await {
                    Ok(q) => Some(q),
                    Err(e) if e.kind() == sked::store::ErrorKind::NotFound => None,
                    Err(e) => return Err(failed(e)),
                },
                _ => None,
            };
            let detail = ScheduleDetail {
                schedule,
                occurrences,
            };
            show(remote, &detail, |d| print_schedule(d, queue.as_ref()));
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
        ScheduleCmd::Backfill { name, from, to } => {
            let now = jiff::Timestamp::now();
            let time = |flag: &str, v: &str| {
                sked_core::parse_time(v, now)
                    .map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
            };
            let (from, to) = (time("--from", &from)?, time("--to", &to)?);
            if from > to {
                return Err(CliError::usage(format!(
                    "--from {from} is later than --to {to}"
                )));
            }
            let report = connect(remote)?
                .schedule_backfill(&name, from, to)
                .await
                .map_err(failed)?;
            show(remote, &report, |r| {
                for run in &r.enqueued {
                    out!("{} {}", run.nominal_at, run.task_id);
                }
                out!(
                    "enqueued {} occurrences; {} already had a run",
                    r.enqueued.len(),
                    r.already
                );
            });
        }
        ScheduleCmd::Trigger { name } => {
            let id = connect(remote)?
                .schedule_trigger(&name)
                .await
                .map_err(failed)?;
            show(remote, &Triggered { id }, |t| out!("{}", t.id));
        }
        ScheduleCmd::Apply(a) => super::apply::apply(a, remote).await?,
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

/// Whether a run is unfinished: `yes` (running), `retrying 3/25` (waiting to retry), `no`.
pub(crate) fn running(s: &sked::store::Schedule) -> String {
    match (s.running, &s.retrying) {
        (true, _) => "yes".into(),
        (false, Some(r)) => format!("retrying {}/{}", r.attempt, r.max_attempts),
        (false, None) => "no".into(),
    }
}

/// How the latest run went: `failed` while a run waits to retry, else how the latest finished
/// run ended.
pub(crate) fn last_outcome(s: &sked::store::Schedule) -> String {
    match &s.retrying {
        Some(_) => "failed".into(),
        None => opt(s.last_outcome.as_ref()),
    }
}

/// A page of schedules as a table, and where the next page starts.
fn print_list(list: &ScheduleList) {
    let rows = list
        .schedules
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                s.spec.clone(),
                s.tz.clone(),
                match (s.paused, &s.ended) {
                    (true, _) => "paused".into(),
                    (false, Some(_)) => "ended".into(),
                    (false, None) => time_in(s.next_fire_at, &s.tz),
                },
                time_in(s.last_started_at, &s.tz),
                time_in(s.last_finished_at, &s.tz),
                running(s),
                last_outcome(s),
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
    if let Some(next) = &list.next_after {
        eprintln!("more follow: --after {next}");
    }
}

/// A schedule's fields, its queue's limits and its recent occurrences, for `sked schedule get`.
fn print_schedule(d: &ScheduleDetail, queue: Option<&sked::QueueInfo>) {
    let s = &d.schedule;
    let fields = [
        ("name", s.name.clone()),
        ("spec", s.spec.clone()),
        ("tz", s.tz.clone()),
        ("overlap", s.overlap.to_string()),
        ("catchup", s.catchup.as_str().to_string()),
        (
            "catchup_window",
            sked_core::format_duration(s.catchup_window),
        ),
        ("from", s.from.as_str().to_string()),
        (
            "jitter",
            s.jitter
                .map(sked_core::format_duration)
                .unwrap_or_else(|| "-".into()),
        ),
        ("dst", s.dst.as_str().to_string()),
        ("pause_after_failures", opt(s.pause_after_failures.as_ref())),
        ("keep_retrying", s.keep_retrying.to_string()),
        ("start_at", time_in(s.start_at, &s.tz)),
        ("end_at", time_in(s.end_at, &s.tz)),
        (
            "runs",
            match s.max_runs {
                Some(max) => format!("{} of max_runs {max}", s.runs),
                None => s.runs.to_string(),
            },
        ),
        ("ended", s.ended.clone().unwrap_or_else(|| "-".into())),
        (
            "skip_calendars",
            match s.skip_calendars.as_slice() {
                [] => "-".into(),
                names => names.join(", "),
            },
        ),
        (
            "paused",
            match &s.paused_reason {
                Some(why) if s.paused => format!("true ({why})"),
                _ => s.paused.to_string(),
            },
        ),
        ("next_fire_at", time_in(s.next_fire_at, &s.tz)),
        ("last_started_at", time_in(s.last_started_at, &s.tz)),
        ("last_finished_at", time_in(s.last_finished_at, &s.tz)),
        ("running", running(s)),
        (
            "last_outcome",
            match &s.retrying {
                Some(r) => format!("failed (task {} waits to retry)", r.task_id),
                None => opt(s.last_outcome.as_ref()),
            },
        ),
        match (&s.task, &s.workflow) {
            (_, Some(w)) => ("workflow", workflow_summary(w)),
            (task, None) => ("task", serde_json::to_string(task).unwrap_or_default()),
        },
        ("queue_limits", queue.map(queue_limits).unwrap_or_default()),
    ];
    crate::output::fields(&fields);
    out!();
    let rows = d
        .occurrences
        .iter()
        .map(|o| {
            vec![
                time_in(Some(o.nominal_at), &s.tz),
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

/// A queue's limits in a line: `concurrency 5, rate 10/s, per key 2, per key 5/s, held by rate`
/// (`none` without any).
/// A workflow a schedule starts, in one line: its name, and its tasks with what each waits for
/// (`etl: extract, transform after extract, load after transform`).
fn workflow_summary(w: &sked::NewWorkflow) -> String {
    let tasks: Vec<String> = (w.tasks.iter())
        .map(|t| match t.after.is_empty() {
            true => format!("{} ({})", t.name, t.task.kind),
            false => format!("{} ({}) after {}", t.name, t.task.kind, t.after.join(", ")),
        })
        .collect();
    let name = w.name.as_deref().unwrap_or("unnamed");
    format!("{name}: {}", tasks.join("; "))
}

fn queue_limits(q: &sked::QueueInfo) -> String {
    let mut parts = Vec::new();
    if q.paused {
        parts.push("paused".to_string());
    }
    if let Some(n) = q.concurrency_limit {
        parts.push(format!("concurrency {n}"));
    }
    if let Some(r) = q.rate {
        parts.push(format!("rate {r}"));
    }
    if let Some(n) = q.per_key {
        parts.push(format!("per key {n}"));
    }
    if let Some(r) = q.per_key_rate {
        parts.push(format!("per key {r}"));
    }
    if q.held.is_some() {
        parts.push(format!("held by {}", super::queue::held(q)));
    }
    match parts.is_empty() {
        true => "none".into(),
        false => parts.join(", "),
    }
}
