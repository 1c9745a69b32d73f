//! What a materialising pass decides for each schedule, and the rows a batch of plans writes:
//! written once, so that both backends only run the statements.

use jiff::{SignedDuration, Timestamp};
use sked_core::{
    ActiveTask, LastRun, OccurrenceOutcome, Plan, PlanInput, PlannedOccurrence, RunTemplate,
    TaskState,
};

use crate::{RunInsert, RunMade, Schedule, ScheduleMaterialiseParams, TaskId, TaskInsert};

/// The longest look-ahead: a schedule written or resumed is first looked at this long before
/// its first occurrence (or at once), so no horizon up to this misses one.
pub const HORIZON_MAX: SignedDuration = SignedDuration::from_hours(1);

/// When a schedule written now, with this first unplanned occurrence, is first looked at:
/// [`HORIZON_MAX`] before it, or now; never while paused.
pub fn first_look(
    unplanned_from: Option<Timestamp>,
    paused: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    if paused {
        return None;
    }
    unplanned_from.map(|t| t.checked_sub(HORIZON_MAX).unwrap_or(t).max(now))
}

/// When a schedule is looked at after a plan applied outside a pass (a trigger): no later
/// than it was, nor than [`first_look`] of the plan's next occurrence.
pub fn look_after_apply(
    current: Option<Timestamp>,
    unplanned_from: Option<Timestamp>,
    paused: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let first = first_look(unplanned_from, paused, now);
    match (current, first) {
        _ if paused => None,
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What applying a plan reads of its schedule first (on PostgreSQL, with the row locked).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ApplyCurrent {
    pub next_fire_at: Option<Timestamp>,
    pub look_at: Option<Timestamp>,
    pub awaits_run: bool,
    pub paused: bool,
}

/// The write of a plan applied outside a pass (a trigger), on the schedule as it is now
/// (`None`: there is no such schedule). Refused unless the schedule still fires when the plan
/// was made for, compared as stored (see [`crate::rules::check_plan_current`]).
pub fn apply_write(
    p: &crate::ScheduleApplyParams,
    current: Option<ApplyCurrent>,
) -> crate::Result<PlanWrite> {
    let expected = p.expected_next_fire_at.map(stored);
    super::check_plan_current(&p.name, current.map(|c| c.next_fire_at), expected)?;
    let c = current.unwrap_or_default();
    Ok(PlanWrite::new(
        p.name.clone(),
        p.template.clone(),
        p.plan.clone(),
        look_after_apply(c.look_at, p.plan.next_fire_at, c.paused, p.now),
        c.awaits_run,
    ))
}

/// Refuses an applied plan when the ledger already had one of its lines (`recorded`, as
/// written by the backend, one flag per line of [`ledger_lines`]).
pub fn check_recorded(writes: &[PlanWrite], recorded: &[bool]) -> crate::Result<()> {
    match recorded.iter().position(|r| !r) {
        Some(i) => Err(already_recorded(&ledger_lines(writes)[i])),
        None => Ok(()),
    }
}

/// What a pass does with one schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write the plan, and look at the schedule again at `look_at`.
    Plan(Box<PlanWrite>),
    /// Pause it, saying why (its runs made ahead are withdrawn).
    Pause { reason: String, dead_runs: u32 },
    /// Its spec or zone cannot be evaluated: it is not looked at again until it changes.
    Invalid(String),
}

/// A plan as the backends write it: the ledger lines, the tasks, the cancels, and the
/// schedule's next state.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanWrite {
    pub name: String,
    pub template: RunTemplate,
    pub plan: Plan,
    pub look_at: Option<Timestamp>,
    pub awaits_run: bool,
    /// Runs waiting to retry that stop retrying (end dead) first: the schedule's next
    /// occurrence is planned (see [`plan_due`]).
    pub give_up: Vec<TaskId>,
}

impl PlanWrite {
    /// A plan to write, its times in whole microseconds as both backends store them, so that a
    /// line, its task and the schedule name each occurrence by the same time.
    pub fn new(
        name: String,
        template: RunTemplate,
        mut plan: Plan,
        look_at: Option<Timestamp>,
        awaits_run: bool,
    ) -> PlanWrite {
        for o in &mut plan.occurrences {
            o.nominal_at = stored(o.nominal_at);
            o.run_at = o.run_at.map(stored);
        }
        plan.buffered = plan.buffered.map(stored);
        plan.next_fire_at = plan.next_fire_at.map(stored);
        PlanWrite {
            name,
            template,
            plan,
            look_at: look_at.map(stored),
            awaits_run,
            give_up: Vec::new(),
        }
    }
}

/// `t` in whole microseconds (towards the past), as stored.
pub fn stored(t: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(t.as_microsecond()).unwrap_or(t)
}

/// Plans schedule `s` (its unfinished tasks `active`, oldest first, and
/// `dead_runs` as [`crate::DueSchedule::dead_runs`]) at `p.now`, making ahead what falls
/// within the horizon.
///
/// A run's retries end when the schedule's next occurrence is planned: its runs waiting to
/// retry (`retrying`) end dead first and no longer count as unfinished, so a failing job does
/// not hold its later runs back for days of backoff. Intervals counted from the last run are
/// left out: their next occurrence waits for that run by design.
pub fn plan_due(
    s: &Schedule,
    active: &[ActiveTask],
    dead_runs: u32,
    calendars: &Calendars,
    p: &ScheduleMaterialiseParams,
) -> Decision {
    if s.pause_after_failures.is_some_and(|n| dead_runs >= n) {
        return Decision::Pause {
            reason: format!("paused itself: its last {dead_runs} runs in a row ended dead"),
            dead_runs,
        };
    }
    let (spec, tz) = match s.timing() {
        Ok(timing) => timing,
        Err(e) => return Decision::Invalid(e.to_string()),
    };
    let template = match s.template() {
        Ok(template) => template,
        Err(e) => return Decision::Invalid(e.to_string()),
    };
    let calendars = match calendars.of(s) {
        Ok(calendars) => calendars,
        Err(e) => return Decision::Invalid(e),
    };
    let calendars = calendars.as_slice();
    let horizon = p.horizon.clamp(SignedDuration::ZERO, HORIZON_MAX);
    let until = p.now.checked_add(horizon).unwrap_or(p.now);
    let next_planned = s.unplanned_from.is_some_and(|t| t <= until);
    let (give_up, runs): (Vec<_>, Vec<_>) = active.iter().copied().partition(|t| {
        t.state == TaskState::Retrying
            && next_planned
            && s.from == sked_core::IntervalFrom::Fixed
            && !s.keep_retrying
    });
    let give_up: Vec<TaskId> = give_up.into_iter().map(|t| t.id).collect();
    let input = PlanInput {
        name: &s.name,
        spec: &spec,
        tz: &tz,
        anchor: s.anchor_at,
        next_fire_at: s.unplanned_from,
        overlap: s.overlap,
        catchup: s.catchup,
        catchup_window: s.catchup_window,
        misfire_grace: p.misfire_grace,
        active_tasks: &runs,
        buffered: s.buffered_at,
        catchup_limit: p.catchup_limit,
        from: s.from,
        jitter: s.jitter,
        last_run: LastRun {
            started_at: s.last_started_at,
            finished_at: s.last_finished_at,
            running: s.running,
        },
        bounds: s.bounds(),
        runs_left: s.runs_left(),
        calendars,
    };
    let mut ahead = sked_core::plan_ahead(&input, p.now, until);
    if let (Some(first), false) = (ahead.plan.occurrences.first_mut(), give_up.is_empty()) {
        let ids: Vec<String> = give_up.iter().map(|id| id.to_string()).collect();
        let note = format!(
            "the runs retrying (task {}) stopped retrying",
            ids.join(", ")
        );
        first.detail = Some(match first.detail.take() {
            Some(d) => format!("{d}; {note}"),
            None => note,
        });
    }
    let mut write = PlanWrite::new(
        s.name.clone(),
        template,
        ahead.plan,
        ahead.look_at,
        ahead.awaits_run,
    );
    write.give_up = give_up;
    Decision::Plan(Box::new(write))
}

/// The calendars the schedules of a pass skip, by name.
#[derive(Debug, Clone, Default)]
pub struct Calendars(std::collections::HashMap<String, sked_core::Calendar>);

impl Calendars {
    /// The calendars read, from their stored definitions.
    pub fn new(defs: Vec<sked_core::CalendarDef>) -> crate::Result<Calendars> {
        let mut map = std::collections::HashMap::with_capacity(defs.len());
        for d in defs {
            let c = sked_core::Calendar::of(&d)
                .map_err(|e| crate::StoreError::Backend(format!("bad calendar row: {e}")))?;
            map.insert(d.name, c);
        }
        Ok(Calendars(map))
    }

    /// The calendars `s` skips; an error naming one that does not exist.
    pub fn of(&self, s: &Schedule) -> Result<Vec<&sked_core::Calendar>, String> {
        (s.skip_calendars.iter())
            .map(|n| (self.0.get(n)).ok_or_else(|| format!("unknown calendar {n:?}")))
            .collect()
    }

    /// The names the schedules skip, each once: what a pass reads.
    pub fn names<'a>(schedules: impl IntoIterator<Item = &'a Schedule>) -> Vec<String> {
        let mut names: Vec<String> = (schedules.into_iter())
            .flat_map(|s| s.skip_calendars.iter().cloned())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// What a pass does with the schedules it took: the plans to write, the schedules to pause
/// and those that cannot be evaluated.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub writes: Vec<PlanWrite>,
    /// Name, why, and its dead runs in a row.
    pub pauses: Vec<(String, String, u32)>,
    /// Name and why.
    pub invalid: Vec<(String, String)>,
    /// Schedules planned (pauses and invalid ones included).
    pub planned: u32,
    /// Schedules were left unplanned: the plans reached `max_enqueued` tasks.
    pub more: bool,
}

/// Plans each of the schedules a pass took (each with its unfinished tasks, oldest first, and
/// its dead runs in a row; `calendars`: those they skip), in order, until the plans hold `p.max_enqueued` tasks.
pub fn plan_batch<'a>(
    due: impl IntoIterator<Item = (&'a Schedule, &'a [ActiveTask], u32)>,
    calendars: &Calendars,
    p: &ScheduleMaterialiseParams,
) -> Batch {
    let mut batch = Batch::default();
    let mut enqueued = 0;
    for (s, active, dead_runs) in due {
        if enqueued >= p.max_enqueued {
            batch.more = true;
            break;
        }
        batch.planned += 1;
        match plan_due(s, active, dead_runs, calendars, p) {
            Decision::Plan(w) => {
                enqueued += w
                    .plan
                    .occurrences
                    .iter()
                    .filter(|o| o.outcome == OccurrenceOutcome::Enqueued)
                    .count();
                batch.writes.push(*w);
            }
            Decision::Pause { reason, dead_runs } => {
                batch.pauses.push((s.name.clone(), reason, dead_runs))
            }
            Decision::Invalid(why) => batch.invalid.push((s.name.clone(), why)),
        }
    }
    batch
}

impl Batch {
    /// What a pass that wrote this batch reports; `full`: it took as many schedules as it was
    /// allowed to.
    pub fn report(&self, written: Written, full: bool) -> crate::MaterialiseReport {
        let mut report = crate::MaterialiseReport {
            planned: self.planned,
            more: full || self.more,
            paused: self
                .pauses
                .iter()
                .map(|(n, _, d)| (n.clone(), *d))
                .collect(),
            invalid: self.invalid.clone(),
            outcomes: written.outcomes,
            ..crate::MaterialiseReport::default()
        };
        for made in written.runs.iter().flatten() {
            report.enqueued.extend(made.tasks.iter().cloned());
        }
        report
    }
}

/// What writing a batch of plans did, per line of [`ledger_lines`].
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// Whether its ledger line was written (`false`: one was there already).
    pub recorded: Vec<bool>,
    /// Its run, if it made one.
    pub runs: Vec<Option<RunMade>>,
    /// The outcomes of the lines written.
    pub outcomes: Vec<OccurrenceOutcome>,
}

/// One line a batch of plans writes to the ledger: plan `write`'s occurrence `occ`.
#[derive(Debug, Clone, Copy)]
pub struct LedgerLine<'a> {
    pub write: &'a PlanWrite,
    pub occ: &'a PlannedOccurrence,
}

impl LedgerLine<'_> {
    /// An `enqueued` line may release the occurrence a `buffered` line holds.
    pub fn may_release(&self) -> bool {
        self.occ.outcome == OccurrenceOutcome::Enqueued
    }

    /// The run it makes, if it enqueues one: its task, or its workflow, every task of which
    /// carries the schedule and the occurrence and starts no sooner than the occurrence.
    pub fn run(&self, now: Timestamp) -> crate::Result<Option<RunInsert>> {
        if self.occ.outcome != OccurrenceOutcome::Enqueued {
            return Ok(None);
        }
        run_insert(
            &self.write.template,
            &self.write.name,
            self.occ.nominal_at,
            self.occ.run_at,
            now,
        )
        .map(Some)
    }
}

/// What occurrence `nominal_at` of schedule `name` inserts, due at `run_at` (`None`: at once).
pub fn run_insert(
    template: &RunTemplate,
    name: &str,
    nominal_at: Timestamp,
    run_at: Option<Timestamp>,
    now: Timestamp,
) -> crate::Result<RunInsert> {
    let tag = |mut task: sked_core::NewTask| {
        task.run_at = run_at;
        TaskInsert {
            task,
            schedule: Some(name.to_string()),
            nominal_at: Some(nominal_at),
        }
    };
    Ok(match template {
        RunTemplate::Task(t) => {
            // A run's deadline counts from its occurrence's time, so a run made late (caught
            // up, or buffered behind another) is held to it too.
            let mut task = t.to_new_task();
            if let Some(ttl) = task.ttl.take() {
                task.expires_at = Some(
                    nominal_at
                        .checked_add(ttl)
                        .map_err(|e| crate::StoreError::Invalid(format!("ttl: {e}")))?,
                );
            }
            RunInsert::Task(Box::new(tag(task)))
        }
        RunTemplate::Workflow(w) => {
            let order = super::workflows::InsertOrder::of(w)?;
            let tasks: Vec<crate::TaskInsert> = (order.order.iter())
                .map(|&i| tag(w.tasks[i].task.clone()))
                .collect();
            RunInsert::Workflow(crate::WorkflowCreateParams {
                name: w.name.clone(),
                tasks: order.inserts(w, tasks),
                schedule: Some(name.to_string()),
                nominal_at: Some(nominal_at),
                now,
            })
        }
    })
}

/// Every ledger line of `writes`, plan by plan, in nominal order within each.
pub fn ledger_lines(writes: &[PlanWrite]) -> Vec<LedgerLine<'_>> {
    writes
        .iter()
        .flat_map(|write| {
            write
                .plan
                .occurrences
                .iter()
                .map(move |occ| LedgerLine { write, occ })
        })
        .collect()
}

/// An occurrence whose ledger line was already there when a plan meant to write it: the
/// plan is refused (the ledger's primary key makes a second task for it impossible).
pub fn already_recorded(line: &LedgerLine<'_>) -> crate::StoreError {
    crate::StoreError::Conflict(format!(
        "occurrence {} of schedule {} was already recorded",
        line.occ.nominal_at, line.write.name
    ))
}

#[cfg(test)]
mod tests {
    use sked_core::{OverlapPolicy, ScheduleDef};

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_schedule_is_first_looked_at_an_hour_before_it_fires() {
        assert_eq!(first_look(Some(t(7200)), false, t(0)), Some(t(3600)));
        assert_eq!(first_look(Some(t(60)), false, t(0)), Some(t(0)));
        assert_eq!(first_look(Some(t(60)), true, t(0)), None);
        assert_eq!(first_look(None, false, t(0)), None);
    }

    #[test]
    fn an_apply_writes_only_on_the_schedule_it_was_planned_for() {
        let p = crate::ScheduleApplyParams {
            name: "s".into(),
            // Nanoseconds are compared as stored, in whole microseconds.
            expected_next_fire_at: Some(t(60).checked_add(SignedDuration::from_nanos(7)).unwrap()),
            plan: sked_core::Plan {
                occurrences: vec![],
                cancel: vec![],
                buffered: None,
                next_fire_at: Some(t(7200)),
                runs: 0,
            },
            template: RunTemplate::Task(sked_core::TaskTemplate::new("k")),
            now: t(0),
        };
        let current = |next: i64, paused| ApplyCurrent {
            next_fire_at: Some(t(next)),
            look_at: Some(t(30)),
            awaits_run: true,
            paused,
        };
        let w = apply_write(&p, Some(current(60, false))).unwrap();
        // Looked at no later than it was, nor than an hour before its next occurrence.
        assert_eq!((w.look_at, w.awaits_run), (Some(t(30)), true));
        let w = apply_write(&p, Some(current(60, true))).unwrap();
        assert_eq!(w.look_at, None, "a paused schedule is not looked at");
        assert!(matches!(
            apply_write(&p, Some(current(61, false))),
            Err(crate::StoreError::Conflict(_))
        ));
        assert!(matches!(
            apply_write(&p, None),
            Err(crate::StoreError::NotFound { .. })
        ));
        let writes = [w];
        assert!(check_recorded(&writes, &[]).is_ok());
    }

    #[test]
    fn a_pass_pauses_a_failing_schedule_before_planning_it() {
        let def = ScheduleDef::new("s", "every 10s", sked_core::TaskTemplate::new("k"))
            .overlap(OverlapPolicy::Allow)
            .pause_after_failures(2);
        let s = crate::rules::schedules::tests::stored(&def);
        let p = ScheduleMaterialiseParams {
            now: t(95),
            horizon: SignedDuration::from_secs(20),
            limit: 10,
            max_enqueued: 100,
            misfire_grace: SignedDuration::from_secs(10),
            catchup_limit: 10,
            runs_ended: vec![],
        };
        assert!(matches!(
            plan_due(&s, &[], 2, &Calendars::default(), &p),
            Decision::Pause { dead_runs: 2, .. }
        ));
        let Decision::Plan(w) = plan_due(&s, &[], 1, &Calendars::default(), &p) else {
            panic!("planned")
        };
        // 100 s is made ahead; 110 s is planned once 100 s is due, half-way to 110 s.
        let nominal: Vec<_> = w.plan.occurrences.iter().map(|o| o.nominal_at).collect();
        assert_eq!(nominal, [t(100)]);
        assert_eq!(w.look_at, Some(t(105)));
        let lines = ledger_lines(std::slice::from_ref(&w));
        let Ok(Some(RunInsert::Task(task))) = lines[0].run(t(95)) else {
            panic!("a task")
        };
        assert_eq!(task.task.run_at, Some(t(100)));
        assert_eq!(task.nominal_at, Some(t(100)));
    }
}
