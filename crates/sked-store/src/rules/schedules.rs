//! What every backend computes the same way for schedules: how a declared or rewritten
//! schedule compares with the stored one, the compare-and-set of applying a plan, the task an
//! occurrence enqueues, the policy columns, and what a backfill may enqueue.

use jiff::Timestamp;
use sked_core::Task;

/// How a declared schedule compares with the stored one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncAction {
    Create,
    Update,
    Unchanged,
}

/// Whether writing `def` over `existing`, with `group` (see
/// [`crate::ScheduleWriteParams::group`]), creates, changes or keeps it. A group's write does not
/// compare the paused flag: an operator's pause survives a redeploy.
pub fn sync_action(
    existing: Option<&crate::Schedule>,
    def: &sked_core::ScheduleDef,
    group: Option<&str>,
) -> SyncAction {
    let Some(s) = existing else {
        return SyncAction::Create;
    };
    let same = s.spec == def.spec
        && s.tz == def.tz
        && s.task == def.task
        && s.workflow == def.workflow
        && s.overlap == def.overlap
        && s.catchup == def.catchup
        && s.catchup_window == def.catchup_window
        && s.from == def.from
        && s.jitter == def.jitter
        && s.dst == def.dst
        && s.pause_after_failures == def.pause_after_failures
        && s.keep_retrying == def.keep_retrying
        && s.start_at == def.start_at
        && s.end_at == def.end_at
        && s.max_runs == def.max_runs
        && s.skip_calendars == def.skip_calendars
        && match group {
            Some(g) => s.declared_by.as_deref() == Some(g),
            None => s.paused == def.paused,
        };
    if same {
        SyncAction::Unchanged
    } else {
        SyncAction::Update
    }
}

/// The stored columns of a schedule written over `existing` (read after its runs made ahead
/// were withdrawn), as [`crate::Store::schedule_write_many`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewritten {
    /// A group's existing schedule keeps its own; otherwise the definition's.
    pub paused: bool,
    pub next_fire_at: Option<Timestamp>,
    pub anchor_at: Timestamp,
    pub look_at: Option<Timestamp>,
}

/// How a declared schedule is written over `existing`, with `group`.
pub fn rewritten(
    existing: Option<&crate::Schedule>,
    d: &crate::DeclaredSchedule,
    group: Option<&str>,
    now: Timestamp,
) -> Rewritten {
    let (how, paused) = match (group, existing) {
        (Some(_), Some(s)) => (Rewrite::Declared, s.paused),
        (Some(_), None) => (Rewrite::Declared, d.def.paused),
        (None, _) => (Rewrite::RunTime, d.def.paused),
    };
    let (next_fire_at, anchor_at) = rewritten_times(existing, &d.def, how, d.next_fire_at, now);
    Rewritten {
        paused,
        next_fire_at,
        anchor_at,
        look_at: super::first_look(next_fire_at, paused, now),
    }
}

/// Records `name` in the report under `action`; whether the schedule must be written.
pub fn note_sync(report: &mut crate::ScheduleSyncReport, action: SyncAction, name: &str) -> bool {
    let list = match action {
        SyncAction::Unchanged => &mut report.unchanged,
        SyncAction::Create => &mut report.created,
        SyncAction::Update => &mut report.updated,
    };
    list.push(name.to_string());
    action != SyncAction::Unchanged
}

/// The least string after every string that starts with `prefix`, bytewise (code point
/// order): the prefix with its last character raised by one; `None` when no string is.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let raised = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(r) = raised {
            chars.push(r);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Checks a write of many schedules: each valid, no name twice, a valid group, pruning only
/// with a group. The error names the first bad one.
pub fn check_write(p: &crate::ScheduleWriteParams) -> crate::Result<()> {
    if let Some(g) = &p.group {
        sked_core::validate_name("schedule group", g)
            .map_err(|e| crate::StoreError::Invalid(e.to_string()))?;
    } else if p.prune {
        return Err(crate::StoreError::Invalid(
            "pruning needs a group: the schedules not written are the group's".into(),
        ));
    }
    let mut seen = std::collections::HashSet::with_capacity(p.schedules.len());
    for d in &p.schedules {
        d.def
            .validate()
            .map_err(|e| crate::StoreError::Invalid(format!("schedule {:?}: {e}", d.def.name)))?;
        if !seen.insert(d.def.name.as_str()) {
            return Err(crate::StoreError::Invalid(format!(
                "schedule {:?} is given twice",
                d.def.name
            )));
        }
    }
    Ok(())
}

/// How a schedule is written over a stored one of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewrite {
    /// Made or replaced at run time (API, CLI): pausing or resuming fires from now.
    RunTime,
    /// Declared in code: the stored paused flag stays (an operator's pause survives a
    /// redeploy), so it does not decide the next fire time.
    Declared,
}

/// The next fire time and the anchor a schedule gets when written over `existing`: the stored
/// next fire time survives a write that does not change when the schedule fires (same spec and
/// zone, bounds and most runs, and for a run-time write the same paused flag), and intervals
/// keep counting from the old anchor while the spec is the same. A schedule that has made its
/// most runs fires no more. `next_fire_at` and `now` are those of a new schedule.
pub fn rewritten_times(
    existing: Option<&crate::Schedule>,
    def: &sked_core::ScheduleDef,
    how: Rewrite,
    next_fire_at: Option<Timestamp>,
    now: Timestamp,
) -> (Option<Timestamp>, Timestamp) {
    let Some(old) = existing else {
        return (next_fire_at, now);
    };
    let same_times = old.spec == def.spec
        && old.tz == def.tz
        && old.dst == def.dst
        && old.from == def.from
        && old.start_at == def.start_at
        && old.end_at == def.end_at
        && old.max_runs == def.max_runs
        && (how == Rewrite::Declared || old.paused == def.paused);
    let next = if def.max_runs.is_some_and(|max| old.runs >= max) {
        None
    } else if same_times {
        old.unplanned_from
    } else {
        next_fire_at
    };
    let anchor = if old.spec == def.spec {
        old.anchor_at
    } else {
        now
    };
    (next, anchor)
}

/// Why schedule `s` fires no more, if it has ended: it has made its `max_runs`, or, not
/// paused, it has no occurrence to plan before its `end_at`.
pub fn ended(s: &crate::Schedule) -> Option<String> {
    match (s.max_runs, s.end_at) {
        (Some(max), _) if s.runs >= max => Some(format!(
            "no more occurrences: it made its max_runs, {max} run{}",
            if max == 1 { "" } else { "s" }
        )),
        (_, Some(end)) if !s.paused && s.unplanned_from.is_none() => {
            Some(format!("no more occurrences: its end_at is {end}"))
        }
        _ => None,
    }
}

/// Applying a plan is a compare-and-set: the schedule (`current`: its stored next fire time,
/// `None` when there is no such schedule) must still fire when the plan was made for.
pub fn check_plan_current(
    name: &str,
    current: Option<Option<Timestamp>>,
    expected: Option<Timestamp>,
) -> crate::Result<()> {
    match current {
        None => Err(crate::StoreError::schedule_not_found(name)),
        Some(c) if c != expected => Err(crate::StoreError::Conflict(format!(
            "schedule {name} was advanced by someone else"
        ))),
        Some(_) => Ok(()),
    }
}

/// Cancelling a task a plan replaces (overlap `replace`): one that finished meanwhile, or is
/// gone, has nothing left to replace.
pub fn replaced(cancelled: crate::Result<Task>) -> crate::Result<()> {
    match cancelled {
        Ok(_) | Err(crate::StoreError::Transition(_)) | Err(crate::StoreError::NotFound { .. }) => {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A schedule's policy columns as backends store them.
#[derive(Debug, Clone, Copy)]
pub struct PolicyColumns {
    pub interval_from: &'static str,
    pub jitter_ms: Option<i64>,
    pub dst: &'static str,
    pub pause_after_failures: Option<i32>,
    pub keep_retrying: bool,
    pub start_at: Option<Timestamp>,
    pub end_at: Option<Timestamp>,
    /// Validated: at most [`sked_core::MAX_RUNS`].
    pub max_runs: Option<i64>,
}

impl PolicyColumns {
    pub fn of(def: &sked_core::ScheduleDef) -> PolicyColumns {
        PolicyColumns {
            interval_from: def.from.as_str(),
            jitter_ms: def.jitter.map(|j| j.as_millis() as i64),
            dst: def.dst.as_str(),
            // Validated: at most MAX_PAUSE_AFTER_FAILURES.
            pause_after_failures: def.pause_after_failures.map(|n| n as i32),
            keep_retrying: def.keep_retrying,
            start_at: def.start_at,
            end_at: def.end_at,
            max_runs: def.max_runs.map(|n| n.min(sked_core::MAX_RUNS) as i64),
        }
    }
}

/// The policies read back from their columns.
pub fn policies_from_columns(
    interval_from: &str,
    jitter_ms: Option<i64>,
    dst: &str,
    pause_after_failures: Option<i32>,
) -> std::result::Result<
    (
        sked_core::IntervalFrom,
        Option<jiff::SignedDuration>,
        sked_core::DstPolicy,
        Option<u32>,
    ),
    sked_core::SpecError,
> {
    Ok((
        interval_from.parse()?,
        jitter_ms.map(jiff::SignedDuration::from_millis),
        dst.parse()?,
        pause_after_failures.map(|n| n.max(0) as u32),
    ))
}

/// A backfill may only enqueue occurrences that are past: not later than `now`, and, unless
/// the schedule is paused, earlier than its next fire time (the scheduler has not reached
/// later ones, and would find their ledger line taken; a resumed schedule fires from then on).
pub fn check_backfill(
    s: &crate::Schedule,
    nominals: &[Timestamp],
    now: Timestamp,
) -> crate::Result<()> {
    let (name, next_fire_at) = (&s.name, s.unplanned_from.filter(|_| !s.paused));
    for &t in nominals {
        if t > now || next_fire_at.is_some_and(|next| t >= next) {
            return Err(crate::StoreError::Invalid(format!(
                "occurrence {t} of schedule {name} is not past yet: a backfill covers occurrences before the next fire time{}",
                next_fire_at.map(|n| format!(" ({n})")).unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The ledger outcomes of an occurrence that has its run (enqueued, or buffered to run), as
/// SQL: a backfill leaves these alone.
pub const HAS_A_RUN: &str = "('enqueued', 'buffered')";

/// The detail of a ledger line a backfill wrote.
pub const BACKFILLED: &str = "backfilled";

/// The run a backfill makes for occurrence `nominal_at` of `s`: due at once.
pub fn backfill_run(
    s: &crate::Schedule,
    nominal_at: Timestamp,
    now: Timestamp,
) -> crate::Result<crate::RunInsert> {
    super::run_insert(&s.template()?, &s.name, nominal_at, None, now)
}

/// What each occurrence of `def` makes, as stored in the schedule's `task` column: the task
/// template, or `{"workflow": …}` (a task template has no field of that name).
pub fn template_column(def: &sked_core::ScheduleDef) -> crate::Result<serde_json::Value> {
    let v = match (&def.task, &def.workflow) {
        (Some(t), _) => serde_json::to_value(t),
        (None, Some(w)) => serde_json::to_value(w).map(|w| serde_json::json!({ "workflow": w })),
        (None, None) => {
            return Err(crate::StoreError::Invalid(format!(
                "schedule {} has neither a task nor a workflow",
                def.name
            )));
        }
    };
    v.map_err(|e| crate::StoreError::Invalid(e.to_string()))
}

/// A schedule's `task` column read: its task template, or its workflow.
pub fn template_of_column(
    v: serde_json::Value,
) -> Result<
    (
        Option<sked_core::TaskTemplate>,
        Option<sked_core::NewWorkflow>,
    ),
    String,
> {
    match v {
        serde_json::Value::Object(mut m) if m.contains_key("workflow") => {
            let w = m.remove("workflow").unwrap_or_default();
            let w = serde_json::from_value(w).map_err(|e| format!("a stored workflow: {e}"))?;
            Ok((None, Some(w)))
        }
        v => Ok((
            Some(serde_json::from_value(v).map_err(|e| format!("a stored task template: {e}"))?),
            None,
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use sked_core::{ScheduleDef, TaskTemplate};

    use super::*;
    use crate::Schedule;

    #[test]
    fn a_prefix_ends_at_its_last_character_raised() {
        assert_eq!(prefix_end("tenant-"), Some("tenant.".into()));
        assert_eq!(prefix_end("abz"), Some("ab{".into()));
        assert_eq!(prefix_end("a\u{D7FF}"), Some("a\u{E000}".into()));
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".into()));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
        // Every name with the prefix sorts in [prefix, end), bytewise.
        for name in ["tenant-", "tenant-1", "tenant-\u{10FFFF}x", "tenant-zzz"] {
            assert!(("tenant-".."tenant.").contains(&name), "{name}");
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// `def` as stored at 0 s, next due at 100 s.
    pub(crate) fn stored(def: &ScheduleDef) -> Schedule {
        Schedule {
            name: def.name.clone(),
            spec: def.spec.clone(),
            tz: def.tz.clone(),
            task: def.task.clone(),
            workflow: def.workflow.clone(),
            overlap: def.overlap,
            catchup: def.catchup,
            catchup_window: def.catchup_window,
            paused: def.paused,
            from: def.from,
            jitter: def.jitter,
            dst: def.dst,
            pause_after_failures: def.pause_after_failures,
            paused_reason: None,
            anchor_at: t(0),
            next_fire_at: Some(t(100)),
            buffered_at: None,
            created_at: t(0),
            updated_at: t(0),
            last_started_at: None,
            last_finished_at: None,
            running: false,
            last_outcome: None,
            retrying: None,
            keep_retrying: false,
            unplanned_from: Some(t(100)),
            declared_by: None,
            start_at: def.start_at,
            end_at: def.end_at,
            max_runs: def.max_runs,
            runs: 0,
            skip_calendars: def.skip_calendars.clone(),
            ended: None,
        }
    }

    #[test]
    fn the_stored_template_reads_back_as_a_task_or_a_workflow() {
        use sked_core::{NewTask, NewWorkflow, WorkflowTask};
        let task = ScheduleDef::new("s", "@daily", TaskTemplate::new("k").queue("q"));
        let workflow = ScheduleDef::for_workflow(
            "w",
            "@daily",
            NewWorkflow::new(vec![
                WorkflowTask::new("a", NewTask::new("x"), Vec::<String>::new()),
                WorkflowTask::new("b", NewTask::new("y").max_attempts(2), ["a"]),
            ]),
        );
        for def in [task, workflow] {
            let column = template_column(&def).unwrap();
            let (t, w) = template_of_column(column).unwrap();
            assert_eq!((t, w), (def.task.clone(), def.workflow.clone()));
        }
        assert!(template_of_column(serde_json::json!({"workflow": []})).is_err());
    }

    #[test]
    fn a_rewrite_keeps_the_next_fire_unless_when_it_fires_changed() {
        let def = ScheduleDef::new("s", "every 90s", TaskTemplate::new("k"));
        let old = stored(&def);
        let (new_next, now) = (Some(t(500)), t(400));
        // New: fires from now.
        assert_eq!(
            rewritten_times(None, &def, Rewrite::RunTime, new_next, now),
            (new_next, now)
        );
        // Only the task changed: the stored next fire time and anchor stay.
        let task_only = ScheduleDef {
            task: Some(TaskTemplate::new("other")),
            ..def.clone()
        };
        assert_eq!(
            rewritten_times(Some(&old), &task_only, Rewrite::RunTime, new_next, now),
            (Some(t(100)), t(0))
        );
        // A new zone: fires anew, intervals still count from the old anchor.
        let zone = def.clone().tz("Europe/Paris");
        assert_eq!(
            rewritten_times(Some(&old), &zone, Rewrite::RunTime, new_next, now),
            (new_next, t(0))
        );
        // A new spec: both anew.
        let spec = ScheduleDef {
            spec: "every 60s".into(),
            ..def.clone()
        };
        assert_eq!(
            rewritten_times(Some(&old), &spec, Rewrite::Declared, new_next, now),
            (new_next, now)
        );
        // Paused at run time changes when it fires; a declaration's paused flag does not.
        let paused = def.clone().paused();
        assert_eq!(
            rewritten_times(Some(&old), &paused, Rewrite::RunTime, None, now),
            (None, t(0))
        );
        assert_eq!(
            rewritten_times(Some(&old), &paused, Rewrite::Declared, new_next, now),
            (Some(t(100)), t(0))
        );
    }

    #[test]
    fn a_plan_applies_only_to_the_schedule_it_was_made_for() {
        assert!(check_plan_current("s", Some(Some(t(1))), Some(t(1))).is_ok());
        let moved = check_plan_current("s", Some(Some(t(2))), Some(t(1))).unwrap_err();
        assert_eq!(moved.kind(), crate::ErrorKind::Conflict);
        let gone = check_plan_current("s", None, Some(t(1))).unwrap_err();
        assert_eq!(gone.kind(), crate::ErrorKind::NotFound);
    }
}
