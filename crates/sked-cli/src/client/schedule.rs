//! `sked schedule …`: declare, inspect, pause, resume, trigger and remove schedules.

use clap::{Args, Subcommand};
use sked::api::{ScheduleDetail, ScheduleList, Triggered};
use sked::{ScheduleDef, TaskTemplate};

use crate::output::{opt, table, time, time_in};
use crate::{CliError, CliResult, Remote};

use super::{connect, failed, flag_duration, parse_payload, show};

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
            show(
                remote,
                &ScheduleList {
                    schedules,
                    next_after: None,
                },
                |list| {
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
                },
            );
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
