//! The types of the schedule operations: writing and declaring schedules, pausing them,
//! what falls due, applying plans, backfills and the ledger.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use sked_core::{
    OccurrenceOutcome, Plan, RunTemplate, ScheduleDef, TaskId, TaskState, TaskTemplate,
};

#[derive(Debug, Clone)]
pub struct ScheduleUpsertParams {
    pub def: ScheduleDef,
    pub next_fire_at: Option<Timestamp>,
    pub now: Timestamp,
}

/// A declared schedule and when it would fire next if it were new or its timing changed.
#[derive(Debug, Clone)]
pub struct DeclaredSchedule {
    pub def: ScheduleDef,
    pub next_fire_at: Option<Timestamp>,
}

/// Schedules written together, in one transaction: all of them, or, when one is invalid or a
/// name is given twice, none.
#[derive(Debug, Clone)]
pub struct ScheduleWriteParams {
    /// Each with when it fires next if it is new or its timing changed.
    pub schedules: Vec<DeclaredSchedule>,
    /// The group that declares them (in code, or in a file applied with a group): each joins
    /// it, and one that exists keeps its paused flag, so that an operator's pause survives a
    /// redeploy. Without a group each is written as [`crate::Store::schedule_upsert`] writes
    /// one, paused flag included, and stays in any group it is in.
    pub group: Option<String>,
    /// Deletes the group's schedules that are not among these (their tasks stay). Only with a
    /// group.
    pub prune: bool,
    /// Decides everything and writes nothing: the report says what the write would change.
    pub dry_run: bool,
    pub now: Timestamp,
}

impl ScheduleWriteParams {
    /// One schedule made at run time, written as [`crate::Store::schedule_upsert`] writes it.
    pub fn one(p: &ScheduleUpsertParams) -> ScheduleWriteParams {
        ScheduleWriteParams {
            schedules: vec![DeclaredSchedule {
                def: p.def.clone(),
                next_fire_at: p.next_fire_at,
            }],
            group: None,
            prune: false,
            dry_run: false,
            now: p.now,
        }
    }
}

/// What a write of many schedules changed (or, in a dry run, would change), by name, each list
/// in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = SyncReport))]
pub struct ScheduleSyncReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub unchanged: Vec<String>,
    /// In the group before, not among those written: deleted (their tasks stay). Only when
    /// pruning.
    pub removed: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct SchedulePauseParams {
    pub name: String,
    pub paused: bool,
    /// Why it paused (kept while it stays paused); `None` for a pause by hand.
    pub reason: Option<String>,
    pub next_fire_at: Option<Timestamp>,
    pub now: Timestamp,
}

/// A schedule as stored, with its status derived from its tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = ScheduleRecord))]
pub struct Schedule {
    pub name: String,
    pub spec: String,
    pub tz: String,
    /// The task each occurrence enqueues; a schedule has this or `workflow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskTemplate>,
    /// The workflow each occurrence starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<sked_core::NewWorkflow>,
    #[cfg_attr(feature = "openapi", schema(value_type = sked_core::openapi::Overlap))]
    pub overlap: sked_core::OverlapPolicy,
    pub catchup: sked_core::CatchupPolicy,
    #[serde(with = "sked_core::serde_duration")]
    #[cfg_attr(feature = "openapi", schema(value_type = sked_core::openapi::Duration))]
    pub catchup_window: SignedDuration,
    pub paused: bool,
    /// Where an interval counts from.
    #[serde(default)]
    pub from: sked_core::IntervalFrom,
    /// Each run moved later by a stable offset below this.
    #[serde(default, with = "sked_core::serde_duration::option")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub jitter: Option<SignedDuration>,
    /// How a fixed-time cron job meets a DST change.
    #[serde(default)]
    pub dst: sked_core::DstPolicy,
    /// Pauses itself when this many runs in a row ended dead.
    #[serde(default)]
    pub pause_after_failures: Option<u32>,
    /// Why it paused itself (`None` when it is not paused, or was paused by hand).
    #[serde(default)]
    pub paused_reason: Option<String>,
    /// A failed run keeps retrying after the next occurrence is planned.
    #[serde(default)]
    pub keep_retrying: bool,
    /// Where intervals count from (the creation time).
    pub anchor_at: Timestamp,
    pub next_fire_at: Option<Timestamp>,
    pub buffered_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// When its most recent run started.
    pub last_started_at: Option<Timestamp>,
    /// When its most recent finished run stopped.
    pub last_finished_at: Option<Timestamp>,
    /// Whether one of its tasks is running now.
    pub running: bool,
    /// The final state of its most recent finished run.
    pub last_outcome: Option<TaskState>,
    /// Its latest run waiting to retry after a failed attempt, if any: unfinished, but
    /// failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrying: Option<RetryingRun>,
    /// The first occurrence the scheduler has not planned yet: where it goes on from.
    /// `next_fire_at` is the first occurrence still to run, which may be one made ahead.
    #[serde(skip)]
    pub unplanned_from: Option<Timestamp>,
    /// The group of the code that declares it ([`crate::Store::schedule_write_many`]); `None` for
    /// a schedule made at run time through the API or CLI.
    #[serde(default)]
    pub declared_by: Option<String>,
    /// No occurrence before this; an interval counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<Timestamp>,
    /// No occurrence after this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<Timestamp>,
    /// It ends once it has made this many runs at its occurrences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u64>,
    /// The runs it has made at its occurrences (runs triggered by hand or backfilled are not
    /// counted).
    #[serde(default)]
    pub runs: u64,
    /// Calendars whose dates it does not fire on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_calendars: Vec<String>,
    /// Why it fires no more, when it has ended: it made its `max_runs`, or no occurrence is
    /// left by its `end_at` (see [`crate::rules::ended`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// A schedule's run waiting to retry: its task, the attempts it made and may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RetryingRun {
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub task_id: TaskId,
    pub attempt: i32,
    pub max_attempts: i32,
}

impl Schedule {
    /// What each occurrence makes.
    pub fn template(&self) -> crate::Result<RunTemplate> {
        match (&self.task, &self.workflow) {
            (Some(t), _) => Ok(RunTemplate::Task(t.clone())),
            (None, Some(w)) => Ok(RunTemplate::Workflow(w.clone())),
            (None, None) => Err(crate::StoreError::Invalid(format!(
                "schedule {} has neither a task nor a workflow",
                self.name
            ))),
        }
    }

    /// Without its tasks' payloads, as a list shows it.
    pub fn without_payloads(mut self) -> Schedule {
        if let Some(t) = &mut self.task {
            t.payload = serde_json::Value::Null;
        }
        for t in self.workflow.iter_mut().flat_map(|w| &mut w.tasks) {
            t.task.payload = serde_json::Value::Null;
        }
        self
    }

    /// Its spec, meeting DST changes by its policy, and its zone.
    pub fn timing(
        &self,
    ) -> std::result::Result<(sked_core::Spec, jiff::tz::TimeZone), sked_core::SpecError> {
        let spec = sked_core::Spec::parse(&self.spec)?.with_dst(self.dst);
        Ok((spec, sked_core::parse_zone(&self.tz)?))
    }

    /// When it may fire.
    pub fn bounds(&self) -> sked_core::Bounds {
        sked_core::Bounds {
            start_at: self.start_at,
            end_at: self.end_at,
        }
    }

    /// How many more runs it may make at its occurrences; `None`: no limit.
    pub fn runs_left(&self) -> Option<u64> {
        self.max_runs.map(|m| m.saturating_sub(self.runs))
    }
}

/// A page of schedules by name.
#[derive(Debug, Clone, Default)]
pub struct ScheduleListParams {
    /// Only schedules whose name sorts after this one (for paging).
    pub after: Option<String>,
    pub limit: u32,
    /// Read the templates' payloads (else they are null).
    pub with_payloads: bool,
    /// Which schedules.
    pub filter: ScheduleFilter,
}

/// Which schedules a list or a count takes; the default takes all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleFilter {
    /// Only names that start with this.
    pub prefix: Option<String>,
    /// Only paused ones (`true`) or only unpaused ones (`false`).
    pub paused: Option<bool>,
    /// Only failing ones: a run waiting to retry, or the latest finished run dead.
    pub failing: bool,
}

/// One pass of the scheduler over the schedules that need planning, in one transaction.
#[derive(Debug, Clone)]
pub struct ScheduleMaterialiseParams {
    pub now: Timestamp,
    /// Occurrences due up to `now + horizon` are made ahead (at most [`crate::rules::HORIZON_MAX`]).
    pub horizon: SignedDuration,
    /// Schedules planned at most.
    pub limit: u32,
    /// No further schedule is planned once the plans hold this many tasks.
    pub max_enqueued: usize,
    /// An occurrence less late than this is on time.
    pub misfire_grace: SignedDuration,
    /// See [`sked_core::PlanInput::catchup_limit`].
    pub catchup_limit: usize,
    /// Schedules a run of which ended since the last pass: those waiting for a run to end
    /// are planned now.
    pub runs_ended: Vec<String>,
}

/// What a materialising pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MaterialiseReport {
    /// The tasks made, with their queues.
    pub enqueued: Vec<(String, TaskId)>,
    /// The ledger lines written, by outcome.
    pub outcomes: Vec<OccurrenceOutcome>,
    /// Schedules that paused themselves, with their dead runs in a row.
    pub paused: Vec<(String, u32)>,
    /// Schedules that cannot be evaluated (their spec or zone), with why: not looked at again
    /// until they change.
    pub invalid: Vec<(String, String)>,
    /// Schedules planned.
    pub planned: u32,
    /// As many schedules as the limit were planned: more may need planning now.
    pub more: bool,
}

#[derive(Debug, Clone)]
pub struct ScheduleDueParams {
    pub now: Timestamp,
    pub limit: u32,
}

#[derive(Debug, Clone)]
pub struct DueSchedule {
    pub schedule: Schedule,
    /// Its unfinished tasks, oldest first.
    pub active_tasks: Vec<TaskId>,
    /// With `pause_after_failures`: how many of its runs in a row since it was last resumed
    /// ended dead (those after the latest run that ended otherwise). 0 without the policy.
    pub dead_runs: u32,
}

/// Occurrences of a schedule to enqueue after the fact, each once: those the ledger has as
/// enqueued or buffered are left alone, skipped and missed ones get their task now.
#[derive(Debug, Clone)]
pub struct ScheduleBackfillParams {
    pub name: String,
    /// Nominal times, ascending: each earlier than the schedule's next fire time and not
    /// later than `now`.
    pub nominals: Vec<Timestamp>,
    pub now: Timestamp,
}

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackfillReport {
    /// The occurrences enqueued now, with their tasks, in nominal order.
    pub enqueued: Vec<BackfilledRun>,
    /// Occurrences in the range that already had a run (enqueued or buffered).
    pub already: u64,
}

/// An occurrence a backfill enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BackfilledRun {
    pub nominal_at: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub task_id: TaskId,
}

#[derive(Debug, Clone)]
pub struct ScheduleApplyParams {
    pub name: String,
    pub expected_next_fire_at: Option<Timestamp>,
    pub plan: Plan,
    pub template: RunTemplate,
    pub now: Timestamp,
}

#[derive(Debug, Clone)]
pub struct OccurrenceListParams {
    pub schedule: String,
    pub limit: u32,
}

/// One line of a schedule's ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Occurrence {
    pub schedule: String,
    pub nominal_at: Timestamp,
    pub outcome: OccurrenceOutcome,
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub task_id: Option<TaskId>,
    /// The state of that task now, if it still exists.
    pub task_state: Option<TaskState>,
    pub detail: Option<String>,
    pub recorded_at: Timestamp,
}

/// A calendar as stored: its dates, their zone, and when it was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CalendarInfo {
    pub name: String,
    /// Its dates, sorted, each once.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub dates: Vec<jiff::civil::Date>,
    /// The zone its dates are in; without one, each schedule's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl CalendarInfo {
    /// Its definition.
    pub fn def(&self) -> sked_core::CalendarDef {
        sked_core::CalendarDef {
            name: self.name.clone(),
            dates: self.dates.clone(),
            tz: self.tz.clone(),
        }
    }
}

/// A calendar to create or replace.
#[derive(Debug, Clone)]
pub struct CalendarPutParams {
    pub def: sked_core::CalendarDef,
    pub now: Timestamp,
}
