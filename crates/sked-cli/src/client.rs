//! Commands that talk to a server over HTTP: tasks, schedules, queues.

use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::output::{self, queue_count, table, text, time};
use crate::{CliError, CliResult, Remote};

/// A thin HTTP client that turns API errors into exit codes.
pub(crate) struct Http {
    remote: Remote,
    client: reqwest::Client,
}

impl Http {
    pub(crate) fn new(remote: &Remote) -> Http {
        Http {
            remote: remote.clone(),
            client: reqwest::Client::new(),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> CliResult<Value> {
        let url = format!("{}{path}", self.remote.url.trim_end_matches('/'));
        let mut req = self.client.request(method, &url);
        if let Some(t) = &self.remote.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            CliError::runtime(format!(
                "cannot reach the sked server at {}: {e}",
                self.remote.url
            ))
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(CliError::runtime)?;
        let v: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok(v);
        }
        let msg = v["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("server answered {status}"));
        Err(match status {
            StatusCode::BAD_REQUEST
            | StatusCode::NOT_FOUND
            | StatusCode::UNPROCESSABLE_ENTITY
            | StatusCode::PAYLOAD_TOO_LARGE => CliError::Usage(msg),
            _ => CliError::Runtime(msg),
        })
    }

    pub(crate) async fn get(&self, path: &str) -> CliResult<Value> {
        self.call(Method::GET, path, None).await
    }

    pub(crate) async fn post(&self, path: &str, body: Option<Value>) -> CliResult<Value> {
        self.call(Method::POST, path, body).await
    }

    /// Prints `v` as JSON when asked, else runs `human`.
    fn show(&self, v: &Value, human: impl FnOnce(&Value)) {
        if self.remote.json {
            out!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
        } else {
            human(v);
        }
    }
}

use sked::client::path_segment as seg;

fn parse_payload(p: Option<&str>) -> CliResult<Value> {
    match p {
        None => Ok(Value::Null),
        Some(s) => serde_json::from_str(s)
            .map_err(|e| CliError::usage(format!("invalid --payload JSON: {e}"))),
    }
}

fn task_id(id: &str) -> CliResult<i64> {
    id.parse()
        .map_err(|_| CliError::usage(format!("invalid task id {id:?}: task ids are integers")))
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
    match cmd {
        TaskCmd::Add(a) => {
            let now = jiff::Timestamp::now();
            let run_at = match (&a.at, &a.in_) {
                (Some(at), _) => Some(sked_core::parse_time(at, now).map_err(CliError::usage)?),
                (None, Some(d)) => {
                    let d = sked_core::parse_duration(d).map_err(CliError::usage)?;
                    Some(now.checked_add(d).map_err(CliError::usage)?)
                }
                (None, None) => None,
            };
            if let Some(t) = &a.timeout {
                sked_core::parse_duration(t)
                    .map_err(|e| CliError::usage(format!("invalid --timeout: {e}")))?;
            }
            let body = json!({
                "kind": a.kind, "queue": a.queue, "payload": parse_payload(a.payload.as_deref())?,
                "priority": a.priority, "run_at": run_at, "max_attempts": a.max_attempts,
                "timeout": a.timeout, "unique_key": a.unique_key,
            });
            let http = Http::new(remote);
            let v = http.post("/v1/tasks", Some(body)).await?;
            http.show(&v, |v| out!("{}", text(&v["id"])));
        }
        TaskCmd::Get { id } => {
            let http = Http::new(remote);
            let v = http.get(&format!("/v1/tasks/{}", task_id(&id)?)).await?;
            http.show(&v, |v| {
                output::fields(
                    v,
                    &[
                        "id",
                        "kind",
                        "queue",
                        "state",
                        "priority",
                        "attempt",
                        "max_attempts",
                        "run_at",
                        "created_at",
                        "started_at",
                        "finished_at",
                        "worker",
                        "schedule",
                        "nominal_at",
                        "last_error",
                    ],
                );
                out!("payload       {}", v["payload"]);
                if !v["result"].is_null() {
                    out!("result        {}", v["result"]);
                }
                if let Some(attempts) = v["attempts"].as_array().filter(|a| !a.is_empty()) {
                    out!();
                    table(
                        &[
                            "ATTEMPT", "WORKER", "STARTED", "FINISHED", "OUTCOME", "ERROR",
                        ],
                        attempts
                            .iter()
                            .map(|a| {
                                vec![
                                    text(&a["attempt"]),
                                    text(&a["worker"]),
                                    time(&a["started_at"]),
                                    time(&a["finished_at"]),
                                    text(&a["outcome"]),
                                    text(&a["error"]),
                                ]
                            })
                            .collect(),
                    );
                }
            });
        }
        TaskCmd::Ls {
            state,
            queue,
            kind,
            schedule,
            limit,
        } => {
            let mut q = format!("/v1/tasks?limit={limit}");
            for (k, v) in [
                ("state", (!state.is_empty()).then(|| state.join(","))),
                ("queue", queue),
                ("kind", kind),
                ("schedule", schedule),
            ] {
                if let Some(v) = v {
                    q.push_str(&format!("&{k}={}", seg(&v).replace("%2C", ",")));
                }
            }
            let http = Http::new(remote);
            let v = http.get(&q).await?;
            http.show(&v, |v| {
                let rows = v["tasks"]
                    .as_array()
                    .map(|tasks| {
                        tasks
                            .iter()
                            .map(|t| {
                                vec![
                                    text(&t["id"]),
                                    text(&t["queue"]),
                                    text(&t["kind"]),
                                    text(&t["state"]),
                                    text(&t["priority"]),
                                    format!("{}/{}", text(&t["attempt"]), text(&t["max_attempts"])),
                                    time(&t["run_at"]),
                                    text(&t["last_error"]),
                                ]
                            })
                            .collect()
                    })
                    .unwrap_or_default();
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
            state_change(remote, &format!("/v1/tasks/{}/cancel", task_id(&id)?), None).await?
        }
        TaskCmd::Retry { id } => {
            state_change(remote, &format!("/v1/tasks/{}/retry", task_id(&id)?), None).await?
        }
        TaskCmd::Import { file, batch } => import(&file, batch, remote).await?,
        TaskCmd::Reschedule { id, at } => {
            let run_at =
                sked_core::parse_time(&at, jiff::Timestamp::now()).map_err(CliError::usage)?;
            let path = format!("/v1/tasks/{}/reschedule", task_id(&id)?);
            state_change(remote, &path, Some(json!({"run_at": run_at.to_string()}))).await?
        }
    }
    Ok(())
}

/// Requests stay well under the server's 2 MiB body limit.
const IMPORT_BATCH_BYTES: usize = 1536 * 1024;

/// `sked task import`: check every line, then enqueue in batches with a progress bar.
async fn import(file: &str, batch: usize, remote: &Remote) -> CliResult {
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
    let mut tasks: Vec<(Value, usize)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |e: &dyn std::fmt::Display| CliError::usage(format!("{file}:{}: {e}", i + 1));
        let v: Value = serde_json::from_str(line).map_err(|e| bad(&e))?;
        let task: sked_core::NewTask = serde_json::from_value(v.clone()).map_err(|e| bad(&e))?;
        task.validate().map_err(|e| bad(&e))?;
        tasks.push((v, line.len()));
    }
    let http = Http::new(remote);
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
        let body = json!({"tasks": rest[..n].iter().map(|(v, _)| v).collect::<Vec<_>>()});
        let reply = http
            .post("/v1/tasks/batch", Some(body))
            .await
            .map_err(|e| {
                bar.abandon();
                let done = created + duplicates;
                let msg = |m: String| format!("{m} (the first {done} tasks were enqueued)");
                match e {
                    CliError::Usage(m) => CliError::Usage(msg(m)),
                    CliError::Runtime(m) => CliError::Runtime(msg(m)),
                }
            })?;
        for t in reply["tasks"].as_array().into_iter().flatten() {
            if t["duplicate"] == true {
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
    let v = json!({
        "imported": created,
        "duplicates": duplicates,
        "seconds": (secs * 1000.0).round() / 1000.0,
    });
    http.show(&v, |_| {
        out!("imported {created} tasks ({duplicates} already there by unique key) in {secs:.2}s")
    });
    Ok(())
}

/// Posts a state change and prints the task's id and new state.
async fn state_change(remote: &Remote, path: &str, body: Option<Value>) -> CliResult {
    let http = Http::new(remote);
    let v = http.post(path, body).await?;
    http.show(&v, |v| {
        let extra = if v["cancel_requested"] == true && v["state"] == "running" {
            " (cancel requested)"
        } else {
            ""
        };
        out!("{} {}{extra}", text(&v["id"]), text(&v["state"]));
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
            let (kind, payload) = match &a.shell {
                Some(cmd) => ("shell".to_string(), json!({"command": cmd})),
                None => (
                    a.kind.clone().unwrap_or_default(),
                    parse_payload(a.payload.as_deref())?,
                ),
            };
            let def = json!({
                "name": a.name, "spec": spec, "tz": a.tz,
                "task": {"kind": kind, "queue": a.queue, "payload": payload, "priority": a.priority,
                         "max_attempts": a.max_attempts, "timeout": a.timeout},
                "overlap": a.overlap, "catchup": a.catchup, "catchup_window": a.catchup_window,
            });
            // Check locally first, so bad input is reported even without a server.
            let parsed: sked_core::ScheduleDef = serde_json::from_value(def.clone())
                .map_err(|e| CliError::usage(format!("invalid schedule: {e}")))?;
            parsed.validate().map_err(CliError::usage)?;
            let http = Http::new(remote);
            let v = http.post("/v1/schedules", Some(def)).await?;
            http.show(&v, |v| {
                out!(
                    "{} next fire {}",
                    text(&v["name"]),
                    output::time_in(&v["next_fire_at"], &v["tz"])
                )
            });
        }
        ScheduleCmd::Ls => {
            let http = Http::new(remote);
            let v = http.get("/v1/schedules").await?;
            http.show(&v, |v| {
                let rows = v["schedules"]
                    .as_array()
                    .map(|list| {
                        list.iter()
                            .map(|s| {
                                let paused = s["paused"] == true;
                                vec![
                                    text(&s["name"]),
                                    text(&s["spec"]),
                                    text(&s["tz"]),
                                    if paused {
                                        "paused".into()
                                    } else {
                                        output::time_in(&s["next_fire_at"], &s["tz"])
                                    },
                                    time(&s["last_started_at"]),
                                    time(&s["last_finished_at"]),
                                    if s["running"] == true {
                                        "yes".into()
                                    } else {
                                        "no".into()
                                    },
                                    text(&s["last_outcome"]),
                                ]
                            })
                            .collect()
                    })
                    .unwrap_or_default();
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
            let http = Http::new(remote);
            let s = http.get(&format!("/v1/schedules/{}", seg(&name))).await?;
            let occ = http
                .get(&format!(
                    "/v1/schedules/{}/occurrences?limit=20",
                    seg(&name)
                ))
                .await?;
            if remote.json {
                let mut s = s;
                s["occurrences"] = occ["occurrences"].clone();
                out!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
                return Ok(());
            }
            output::fields(
                &s,
                &[
                    "name",
                    "spec",
                    "tz",
                    "overlap",
                    "catchup",
                    "catchup_window",
                    "paused",
                    "next_fire_at",
                    "last_started_at",
                    "last_finished_at",
                    "running",
                    "last_outcome",
                ],
            );
            out!("task               {}", s["task"]);
            out!();
            let rows = occ["occurrences"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .map(|o| {
                            vec![
                                time(&o["nominal_at"]),
                                text(&o["outcome"]),
                                text(&o["task_id"]),
                                text(&o["task_state"]),
                                text(&o["detail"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            table(
                &["NOMINAL", "OUTCOME", "TASK", "TASK STATE", "DETAIL"],
                rows,
            );
        }
        ScheduleCmd::Pause { name } => schedule_action(remote, &name, "pause").await?,
        ScheduleCmd::Resume { name } => schedule_action(remote, &name, "resume").await?,
        ScheduleCmd::Trigger { name } => {
            let http = Http::new(remote);
            let v = http
                .post(&format!("/v1/schedules/{}/trigger", seg(&name)), None)
                .await?;
            http.show(&v, |v| out!("{}", text(&v["id"])));
        }
        ScheduleCmd::Rm { name } => {
            let http = Http::new(remote);
            http.call(
                Method::DELETE,
                &format!("/v1/schedules/{}", seg(&name)),
                None,
            )
            .await?;
            if !remote.json {
                out!("removed {name}");
            }
        }
    }
    Ok(())
}

async fn schedule_action(remote: &Remote, name: &str, action: &str) -> CliResult {
    let http = Http::new(remote);
    let v = http
        .post(&format!("/v1/schedules/{}/{action}", seg(name)), None)
        .await?;
    http.show(&v, |v| {
        let state = if v["paused"] == true {
            "paused".to_string()
        } else {
            format!(
                "next fire {}",
                output::time_in(&v["next_fire_at"], &v["tz"])
            )
        };
        out!("{} {state}", text(&v["name"]));
    });
    Ok(())
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
    let v = match cmd {
        QueueCmd::Ls => {
            let http = Http::new(remote);
            let v = http.get("/v1/queues").await?;
            http.show(&v, |v| {
                let rows = v["queues"]
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .map(|q| {
                                vec![
                                    text(&q["name"]),
                                    if q["paused"] == true {
                                        "yes".into()
                                    } else {
                                        "no".into()
                                    },
                                    text(&q["concurrency_limit"]),
                                    queue_count(q, "scheduled"),
                                    queue_count(q, "available"),
                                    queue_count(q, "running"),
                                    queue_count(q, "retrying"),
                                    queue_count(q, "succeeded"),
                                    queue_count(q, "dead"),
                                    queue_count(q, "cancelled"),
                                ]
                            })
                            .collect()
                    })
                    .unwrap_or_default();
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
        QueueCmd::Pause { queue } => {
            Http::new(remote)
                .post(&format!("/v1/queues/{}/pause", seg(&queue)), None)
                .await?
        }
        QueueCmd::Resume { queue } => {
            Http::new(remote)
                .post(&format!("/v1/queues/{}/resume", seg(&queue)), None)
                .await?
        }
        QueueCmd::Limit { queue, limit } => {
            let limit: Value = if limit == "none" {
                Value::Null
            } else {
                json!(limit.parse::<u32>().map_err(|_| CliError::usage(format!(
                    "invalid limit {limit:?}: expected a whole number or none"
                )))?)
            };
            let path = format!("/v1/queues/{}/limit", seg(&queue));
            Http::new(remote)
                .call(Method::PUT, &path, Some(json!({"limit": limit})))
                .await?
        }
    };
    Http::new(remote).show(&v, |v| {
        let paused = if v["paused"] == true {
            "paused"
        } else {
            "running"
        };
        out!(
            "{} {paused}, limit {}",
            text(&v["name"]),
            text(&v["concurrency_limit"])
        );
    });
    Ok(())
}
