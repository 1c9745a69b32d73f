//! Schedules: what fires (cron, interval, once), in which zone, what it enqueues, and what to
//! do when runs overlap or were missed.

mod bounds;
mod calendar;
pub mod cron;
mod describe;
pub mod plan;
mod policy;

use std::fmt;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;
use crate::workflow::NewWorkflow;
use crate::{format_duration, parse_duration};
pub use bounds::Bounds;
pub use calendar::{
    Calendar, CalendarDef, MAX_CALENDAR_DATES, MAX_SKIP_CALENDARS, check_skip_calendars,
    parse_dates,
};
pub use cron::CronExpr;
pub use describe::describe;
pub use policy::{
    CatchupPolicy, DstPolicy, IntervalFrom, MAX_OVERLAP_RUNS, MAX_PAUSE_AFTER_FAILURES,
    OverlapPolicy, jitter_offset,
};

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Spec {
    Cron(CronExpr),
    /// Every fixed duration, counted from the schedule's anchor time.
    Every(SignedDuration),
    /// Once, at this instant.
    Once(Timestamp),
}

impl Spec {
    /// Parses the stored form: a cron expression, `every DUR` or `at TIME`.
    pub fn parse(s: &str) -> Result<Spec, SpecError> {
        let t = s.trim();
        if let Some(d) = t.strip_prefix("every ") {
            return Spec::every(d);
        }
        if let Some(at) = t.strip_prefix("at ") {
            let ts = at
                .trim()
                .parse::<Timestamp>()
                .map_err(|_| SpecError::new(format!("invalid time {at:?}: expected RFC 3339")))?;
            return Ok(Spec::Once(ts));
        }
        CronExpr::parse(t).map(Spec::Cron)
    }

    pub fn every(d: &str) -> Result<Spec, SpecError> {
        let d = parse_duration(d)?;
        if d < SignedDuration::from_secs(1) {
            return Err(SpecError::new("an interval must be at least 1s"));
        }
        Ok(Spec::Every(d))
    }

    /// The first fire time strictly after `after`. `anchor` is where intervals count from.
    pub fn next_after(
        &self,
        after: Timestamp,
        tz: &TimeZone,
        anchor: Timestamp,
    ) -> Option<Timestamp> {
        match self {
            Spec::Cron(c) => c.next_after(after, tz),
            Spec::Every(d) => {
                let step = d.as_nanos();
                let since = after.duration_since(anchor).as_nanos();
                let n = if since < 0 { 0 } else { since / step + 1 };
                anchor
                    .checked_add(SignedDuration::from_nanos_i128(n * step))
                    .ok()
            }
            Spec::Once(at) => (*at > after).then_some(*at),
        }
    }

    /// The same spec, a cron expression meeting DST changes by `dst`.
    pub fn with_dst(self, dst: DstPolicy) -> Spec {
        match self {
            Spec::Cron(c) => Spec::Cron(c.with_dst(dst)),
            other => other,
        }
    }

    /// The spec in words, for people.
    pub fn describe(&self) -> String {
        match self {
            Spec::Cron(c) => format!("cron {}", c.source()),
            Spec::Every(d) => format!("every {}", format_duration(*d)),
            Spec::Once(t) => format!("once at {t}"),
        }
    }
}

impl fmt::Display for Spec {
    /// The stored form, which [`Spec::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Cron(c) => f.write_str(c.source()),
            Spec::Every(d) => write!(f, "every {}", format_duration(*d)),
            Spec::Once(t) => write!(f, "at {t}"),
        }
    }
}

/// Parses an IANA time zone name (`Europe/Berlin`, `UTC`).
pub fn parse_zone(name: &str) -> Result<TimeZone, SpecError> {
    if name.is_empty() {
        return Err(SpecError::new("time zone must not be empty"));
    }
    TimeZone::get(name).map_err(|_| {
        SpecError::new(format!(
            "unknown time zone {name:?}: expected an IANA name like UTC, Europe/Berlin or America/New_York"
        ))
    })
}

/// The default catch-up window: missed occurrences older than this are not run.
pub const DEFAULT_CATCHUP_WINDOW: SignedDuration = SignedDuration::from_hours(1);

/// What each occurrence of a schedule enqueues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskTemplate {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name))]
    pub kind: String,
    #[serde(default = "crate::task::default_queue")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name, default = "default"))]
    pub queue: String,
    #[serde(default)]
    pub payload: serde_json::Value,
    #[serde(default)]
    pub priority: i32,
    #[serde(default = "crate::task::default_max_attempts")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, default = 25))]
    pub max_attempts: i32,
    #[serde(default, with = "crate::serde_duration::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub timeout: Option<SignedDuration>,
    /// The runs' concurrency key (see [`crate::NewTask::key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Key>))]
    pub key: Option<String>,
    /// How long the runs' retries wait (see [`crate::NewTask::backoff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Backoff>))]
    pub backoff: Option<crate::Backoff>,
    /// Each run's deadline to start, counted from its run time (see [`crate::NewTask::ttl`]):
    /// a run not started by then ends `expired`.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub ttl: Option<SignedDuration>,
}

impl TaskTemplate {
    /// A task of this kind: queue `default`, no payload, priority 0, 25 attempts.
    pub fn new(kind: impl Into<String>) -> TaskTemplate {
        TaskTemplate {
            kind: kind.into(),
            queue: crate::task::default_queue(),
            payload: serde_json::Value::Null,
            priority: 0,
            max_attempts: crate::task::default_max_attempts(),
            timeout: None,
            key: None,
            backoff: None,
            ttl: None,
        }
    }

    /// With this concurrency key.
    pub fn key(mut self, key: impl Into<String>) -> TaskTemplate {
        self.key = Some(key.into());
        self
    }

    /// In this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> TaskTemplate {
        self.queue = queue.into();
        self
    }

    /// With this JSON payload.
    pub fn payload(mut self, payload: serde_json::Value) -> TaskTemplate {
        self.payload = payload;
        self
    }

    /// With this priority: higher runs first.
    pub fn priority(mut self, priority: i32) -> TaskTemplate {
        self.priority = priority;
        self
    }

    /// At most this many attempts per run.
    pub fn max_attempts(mut self, n: i32) -> TaskTemplate {
        self.max_attempts = n;
        self
    }

    /// Each attempt is stopped after this long.
    pub fn timeout(mut self, timeout: SignedDuration) -> TaskTemplate {
        self.timeout = Some(timeout);
        self
    }

    /// The runs' retries wait as `backoff` says instead of the default.
    pub fn backoff(mut self, backoff: crate::Backoff) -> TaskTemplate {
        self.backoff = Some(backoff);
        self
    }

    /// Each run not started within `ttl` of its run time ends `expired`.
    pub fn ttl(mut self, ttl: SignedDuration) -> TaskTemplate {
        self.ttl = Some(ttl);
        self
    }

    /// The task one occurrence enqueues.
    pub fn to_new_task(&self) -> crate::NewTask {
        crate::NewTask {
            kind: self.kind.clone(),
            queue: self.queue.clone(),
            payload: self.payload.clone(),
            priority: self.priority,
            run_at: None,
            max_attempts: self.max_attempts,
            timeout: self.timeout,
            unique_key: None,
            unique_for: None,
            debounce: None,
            backoff: self.backoff.clone(),
            expires_at: None,
            ttl: self.ttl,
            key: self.key.clone(),
            traceparent: None,
            depends_on: Vec::new(),
            on_parent_failure: crate::ParentFailure::Cancel,
            batch: None,
        }
    }
}

/// What each occurrence of a schedule makes: one task, or a workflow.
#[derive(Debug, Clone, PartialEq)]
pub enum RunTemplate {
    Task(TaskTemplate),
    Workflow(NewWorkflow),
}

impl RunTemplate {
    /// How many tasks one run puts in each queue, in the order the queues are first named.
    pub fn tasks_per_queue(&self) -> Vec<(&str, usize)> {
        match self {
            RunTemplate::Task(t) => vec![(t.queue.as_str(), 1)],
            RunTemplate::Workflow(w) => {
                let mut queues: Vec<(&str, usize)> = Vec::new();
                for t in &w.tasks {
                    match queues.iter_mut().find(|(q, _)| *q == t.task.queue) {
                        Some((_, n)) => *n += 1,
                        None => queues.push((&t.task.queue, 1)),
                    }
                }
                queues
            }
        }
    }
}

/// Checks a workflow a schedule starts: as a workflow is checked, and its tasks start with
/// the occurrence and wait for one another only, so none has a time, a parent by id or a batch
/// of its own.
fn check_scheduled_workflow(w: &NewWorkflow) -> Result<(), SpecError> {
    w.layers()?;
    for t in &w.tasks {
        let name = &t.name;
        if t.task.run_at.is_some() {
            return Err(SpecError::new(format!(
                "task {name:?}: a scheduled workflow's tasks start at the occurrence, so run_at is not allowed"
            )));
        }
        if !t.task.depends_on.is_empty() {
            return Err(SpecError::new(format!(
                "task {name:?}: a scheduled workflow's tasks wait for one another by name (after), not for task ids (depends_on)"
            )));
        }
        if t.task.batch.is_some() {
            return Err(SpecError::new(format!(
                "task {name:?}: a scheduled workflow's tasks cannot join a batch: a batch ends once, a schedule runs again"
            )));
        }
    }
    Ok(())
}

/// A schedule as a user defines it. Serialized without the fields that have their default
/// values, so that many definitions in one request stay small.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleDef {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name))]
    pub name: String,
    /// A cron expression (5 or 6 fields, or a macro such as `@daily`), `every DUR` or
    /// `at TIME`; one that does not parse is 422.
    pub spec: String,
    /// An IANA time zone; an unknown one is 422.
    #[serde(default = "default_tz", skip_serializing_if = "is_default_tz")]
    #[cfg_attr(feature = "openapi", schema(default = "UTC"))]
    pub tz: String,
    /// The task each occurrence enqueues. A schedule has this or `workflow`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskTemplate>,
    /// The workflow each occurrence starts, instead of one task: every task of a run carries
    /// the schedule and the occurrence, and the overlap policy counts whole runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<NewWorkflow>,
    #[serde(default, skip_serializing_if = "is_default")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Overlap))]
    pub overlap: OverlapPolicy,
    #[serde(default, skip_serializing_if = "is_default")]
    pub catchup: CatchupPolicy,
    #[serde(
        default = "default_window",
        with = "crate::serde_duration",
        skip_serializing_if = "is_default_window"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Duration))]
    pub catchup_window: SignedDuration,
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Where an interval counts from: a fixed grid, or the previous run's start or end.
    #[serde(default, skip_serializing_if = "is_default")]
    pub from: IntervalFrom,
    /// Each occurrence's run is moved later by a stable offset in `[0, jitter)`.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub jitter: Option<SignedDuration>,
    /// How a fixed-time cron job meets a DST change.
    #[serde(default, skip_serializing_if = "is_default")]
    pub dst: DstPolicy,
    /// Pauses itself when this many runs in a row ended dead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
    /// A run that failed keeps retrying after the next occurrence is planned, which then meets
    /// the overlap policy (by default its retries end there: see the schedules decision).
    #[serde(default, skip_serializing_if = "is_default")]
    pub keep_retrying: bool,
    /// No occurrence before this time; an interval counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Timestamp>,
    /// No occurrence after this time: the schedule ends there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<Timestamp>,
    /// The schedule ends once it has made this many runs at its occurrences (runs triggered by
    /// hand or backfilled are not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub max_runs: Option<u64>,
    /// Calendars whose dates it does not fire on: each such occurrence is recorded in the
    /// ledger as excluded, naming the calendar. Each must exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_calendars: Vec<String>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn is_default_tz(tz: &str) -> bool {
    tz == "UTC"
}

fn is_default_window(w: &SignedDuration) -> bool {
    *w == DEFAULT_CATCHUP_WINDOW
}

fn default_tz() -> String {
    "UTC".to_string()
}

fn default_window() -> SignedDuration {
    DEFAULT_CATCHUP_WINDOW
}

impl ScheduleDef {
    /// A schedule named `name` that enqueues `task` at each occurrence of `spec` (a cron
    /// expression, `every DUR` or `at TIME`), in UTC, skipping an occurrence while the last
    /// run is unfinished and catching up the latest missed one within an hour. Checked by
    /// [`ScheduleDef::validate`] (and when it is stored), not here:
    /// `ScheduleDef::new("nightly", "0 3 * * *", TaskTemplate::new("report")).tz("Europe/Paris")`.
    pub fn new(
        name: impl Into<String>,
        spec: impl Into<String>,
        task: TaskTemplate,
    ) -> ScheduleDef {
        ScheduleDef {
            name: name.into(),
            spec: spec.into(),
            tz: default_tz(),
            task: Some(task),
            workflow: None,
            overlap: OverlapPolicy::default(),
            catchup: CatchupPolicy::default(),
            catchup_window: default_window(),
            paused: false,
            from: IntervalFrom::default(),
            jitter: None,
            dst: DstPolicy::default(),
            pause_after_failures: None,
            keep_retrying: false,
            start_at: None,
            end_at: None,
            max_runs: None,
            skip_calendars: Vec::new(),
        }
    }

    /// A schedule named `name` that starts `workflow` at each occurrence of `spec`, with the
    /// defaults of [`ScheduleDef::new`]. Its tasks start at the occurrence; they wait for one
    /// another by name only (no `run_at`, `depends_on` or `batch` of their own).
    pub fn for_workflow(
        name: impl Into<String>,
        spec: impl Into<String>,
        workflow: NewWorkflow,
    ) -> ScheduleDef {
        ScheduleDef {
            task: None,
            workflow: Some(workflow),
            ..ScheduleDef::new(name, spec, TaskTemplate::new(String::new()))
        }
    }

    /// What each occurrence makes, checked: exactly one of `task` and `workflow`.
    pub fn template(&self) -> Result<RunTemplate, SpecError> {
        match (&self.task, &self.workflow) {
            (Some(t), None) => {
                t.to_new_task().validate()?;
                Ok(RunTemplate::Task(t.clone()))
            }
            (None, Some(w)) => {
                check_scheduled_workflow(w)?;
                Ok(RunTemplate::Workflow(w.clone()))
            }
            (Some(_), Some(_)) => Err(SpecError::new(
                "a schedule has a task or a workflow, not both",
            )),
            (None, None) => Err(SpecError::new(
                "a schedule needs a task (what each occurrence enqueues) or a workflow",
            )),
        }
    }

    /// Occurrences are computed in this IANA time zone.
    pub fn tz(mut self, tz: impl Into<String>) -> ScheduleDef {
        self.tz = tz.into();
        self
    }

    /// What happens when an occurrence comes while a run is unfinished.
    pub fn overlap(mut self, overlap: OverlapPolicy) -> ScheduleDef {
        self.overlap = overlap;
        self
    }

    /// What happens to occurrences missed while nothing ran, within `window`.
    pub fn catchup(mut self, catchup: CatchupPolicy, window: SignedDuration) -> ScheduleDef {
        self.catchup = catchup;
        self.catchup_window = window;
        self
    }

    /// An interval counted from the previous run's start or end instead of a fixed grid.
    pub fn from(mut self, from: IntervalFrom) -> ScheduleDef {
        self.from = from;
        self
    }

    /// Each run moved later by a stable pseudo-random offset below `jitter`.
    pub fn jitter(mut self, jitter: SignedDuration) -> ScheduleDef {
        self.jitter = Some(jitter);
        self
    }

    /// How a fixed-time cron job meets a DST change.
    pub fn dst(mut self, dst: DstPolicy) -> ScheduleDef {
        self.dst = dst;
        self
    }

    /// Pauses itself once `n` runs in a row ended dead.
    pub fn pause_after_failures(mut self, n: u32) -> ScheduleDef {
        self.pause_after_failures = Some(n);
        self
    }

    /// A failed run keeps retrying after the next occurrence is planned, instead of ending
    /// dead there; later occurrences meet the overlap policy while it does.
    pub fn keep_retrying(mut self) -> ScheduleDef {
        self.keep_retrying = true;
        self
    }

    /// No occurrence before `start_at`; an interval counts from it.
    pub fn start_at(mut self, start_at: Timestamp) -> ScheduleDef {
        self.start_at = Some(start_at);
        self
    }

    /// No occurrence after `end_at`.
    pub fn end_at(mut self, end_at: Timestamp) -> ScheduleDef {
        self.end_at = Some(end_at);
        self
    }

    /// Ends once it has made `n` runs at its occurrences.
    pub fn max_runs(mut self, n: u64) -> ScheduleDef {
        self.max_runs = Some(n);
        self
    }

    /// Does not fire on the dates of calendar `name`.
    pub fn skip_calendar(mut self, name: impl Into<String>) -> ScheduleDef {
        self.skip_calendars.push(name.into());
        self
    }

    /// When it may fire.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            start_at: self.start_at,
            end_at: self.end_at,
        }
    }

    /// Created paused: nothing fires until it is resumed.
    pub fn paused(mut self) -> ScheduleDef {
        self.paused = true;
        self
    }

    /// Checks the definition and returns its parsed spec and zone.
    pub fn validate(&self) -> Result<(Spec, TimeZone), SpecError> {
        crate::validate_name("schedule name", &self.name)?;
        let spec = Spec::parse(&self.spec)?;
        let tz = parse_zone(&self.tz)?;
        self.template()?;
        crate::check_duration("catchup_window", self.catchup_window)?;
        if self.from != IntervalFrom::Fixed && !matches!(spec, Spec::Every(_)) {
            return Err(SpecError::new(format!(
                "from {} needs an interval (every DUR): a cron or one-time schedule fires at fixed times",
                self.from
            )));
        }
        if let Some(j) = self.jitter {
            crate::check_duration("jitter", j)?;
            if j < SignedDuration::from_millis(1) {
                return Err(SpecError::new("jitter must be at least 1ms"));
            }
        }
        if self.dst != DstPolicy::Debian && !matches!(spec, Spec::Cron(_)) {
            return Err(SpecError::new(format!(
                "dst {} applies to cron schedules: an interval or one-time schedule does not follow wall time",
                self.dst
            )));
        }
        if let Some(n) = self.pause_after_failures
            && (n == 0 || n > MAX_PAUSE_AFTER_FAILURES)
        {
            return Err(SpecError::new(format!(
                "pause_after_failures must be from 1 to {MAX_PAUSE_AFTER_FAILURES}, not {n}"
            )));
        }
        if let (Some(start), Some(end)) = (self.start_at, self.end_at)
            && end <= start
        {
            return Err(SpecError::new(format!(
                "end_at ({end}) must be after start_at ({start})"
            )));
        }
        check_skip_calendars(&self.skip_calendars)?;
        if let Some(n) = self.max_runs
            && !(1..=MAX_RUNS).contains(&n)
        {
            return Err(SpecError::new(format!(
                "max_runs must be from 1 to {MAX_RUNS}, not {n}"
            )));
        }
        Ok((spec.with_dst(self.dst), tz))
    }
}

/// The most runs a schedule can be limited to: what both backends store as a signed 64-bit
/// count.
pub const MAX_RUNS: u64 = i64::MAX as u64;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn etl() -> serde_json::Value {
        json!({"name": "etl", "tasks": [
            {"name": "extract", "kind": "extract"},
            {"name": "load", "kind": "load", "after": ["extract"], "queue": "loads"}
        ]})
    }

    #[test]
    fn a_schedule_starts_a_task_or_a_workflow() {
        let def: ScheduleDef =
            serde_json::from_value(json!({"name": "n", "spec": "@daily", "workflow": etl()}))
                .unwrap();
        let Ok(RunTemplate::Workflow(w)) = def.template() else {
            panic!("a workflow")
        };
        assert_eq!(w.tasks.len(), 2);
        assert!(def.validate().is_ok());
        assert_eq!(
            RunTemplate::Workflow(w).tasks_per_queue(),
            [("default", 1), ("loads", 1)]
        );
        // Written back as given: a workflow, no task.
        let v = serde_json::to_value(&def).unwrap();
        assert!(v.get("task").is_none());
        assert_eq!(v["workflow"]["tasks"][1]["after"], json!(["extract"]));
        let task = json!({"kind": "k"});
        for (body, says) in [
            (
                json!({"name": "n", "spec": "@daily", "task": task, "workflow": etl()}),
                "not both",
            ),
            (json!({"name": "n", "spec": "@daily"}), "needs a task"),
        ] {
            let def: ScheduleDef = serde_json::from_value(body).unwrap();
            let e = def.validate().unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_scheduled_workflows_tasks_start_with_the_occurrence_and_wait_by_name() {
        for (field, value, says) in [
            (
                "run_at",
                json!("2030-01-01T00:00:00Z"),
                "run_at is not allowed",
            ),
            ("depends_on", json!([1]), "not for task ids"),
            ("batch", json!(7), "cannot join a batch"),
        ] {
            let mut w = etl();
            w["tasks"][1][field] = value;
            let def: ScheduleDef =
                serde_json::from_value(json!({"name": "n", "spec": "@daily", "workflow": w}))
                    .unwrap();
            let e = def.validate().unwrap_err().to_string();
            assert!(e.contains("task \"load\"") && e.contains(says), "{e}");
        }
        let mut cycle = etl();
        cycle["tasks"][0]["after"] = json!(["load"]);
        let def: ScheduleDef =
            serde_json::from_value(json!({"name": "n", "spec": "@daily", "workflow": cycle}))
                .unwrap();
        assert!(def.validate().unwrap_err().to_string().contains("cycle"));
    }
}
