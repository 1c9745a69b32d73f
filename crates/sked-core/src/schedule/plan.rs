//! Materialisation planning: given a schedule's pending occurrences, the time now and what is
//! still running, decide which occurrences become tasks and which are recorded as skipped,
//! buffered or missed. Pure: the engine reads the inputs, the store applies the plan atomically.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{CatchupPolicy, IntervalFrom, OverlapPolicy, Spec, jitter_offset};
use crate::task::TaskId;

/// How an occurrence ended up, as recorded in the schedule's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OccurrenceOutcome {
    /// A task was enqueued for it.
    Enqueued,
    /// Not run: the previous run was still pending or running (overlap policy `skip`, or a
    /// second occurrence while one is already buffered).
    Skipped,
    /// Held back until the current run ends (overlap policy `buffer_one`).
    Buffered,
    /// Not run: it fell due while no scheduler ran and the catch-up policy left it out.
    Missed,
}

impl OccurrenceOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            OccurrenceOutcome::Enqueued => "enqueued",
            OccurrenceOutcome::Skipped => "skipped",
            OccurrenceOutcome::Buffered => "buffered",
            OccurrenceOutcome::Missed => "missed",
        }
    }

    pub fn parse(s: &str) -> Option<OccurrenceOutcome> {
        [Self::Enqueued, Self::Skipped, Self::Buffered, Self::Missed]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One line of the plan: an occurrence and what happens to it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedOccurrence {
    pub nominal_at: Timestamp,
    pub outcome: OccurrenceOutcome,
    pub detail: Option<String>,
    /// When its task is due (the nominal time moved by the schedule's jitter); `None`: now.
    pub run_at: Option<Timestamp>,
}

impl PlannedOccurrence {
    /// An occurrence with this outcome, its task (if any) due at once.
    pub fn new(
        nominal_at: Timestamp,
        outcome: OccurrenceOutcome,
        detail: Option<String>,
    ) -> PlannedOccurrence {
        PlannedOccurrence {
            nominal_at,
            outcome,
            detail,
            run_at: None,
        }
    }
}

/// The schedule's previous run, for intervals counted from it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LastRun {
    /// When its most recent run started.
    pub started_at: Option<Timestamp>,
    /// When its most recent finished run ended.
    pub finished_at: Option<Timestamp>,
    /// Whether one of its runs is running now.
    pub running: bool,
}

/// What the planner needs to know about a schedule.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// The schedule's name (jitter depends on it).
    pub name: &'a str,
    pub spec: &'a Spec,
    pub tz: &'a TimeZone,
    pub anchor: Timestamp,
    /// The first occurrence not yet handled.
    pub next_fire_at: Option<Timestamp>,
    pub overlap: OverlapPolicy,
    pub catchup: CatchupPolicy,
    pub catchup_window: SignedDuration,
    /// Occurrences later than this are on time; older ones count as missed.
    pub misfire_grace: SignedDuration,
    /// The schedule's unfinished tasks (pending or running), oldest first.
    pub active_tasks: &'a [TaskId],
    /// An occurrence held back by `buffer_one`.
    pub buffered: Option<Timestamp>,
    /// At most this many of the due occurrences inside the catch-up window are planned one by
    /// one (the most recent); older ones are recorded as missed in one line. With catch-up
    /// `all`, this is the most runs one catch-up makes.
    pub catchup_limit: usize,
    /// Where an interval counts from.
    pub from: IntervalFrom,
    /// Each enqueued occurrence's task is due this much after its nominal time at most.
    pub jitter: Option<SignedDuration>,
    /// The previous run (read for intervals counted from it).
    pub last_run: LastRun,
}

/// The default [`PlanInput::catchup_limit`].
pub const DEFAULT_CATCHUP_LIMIT: usize = 1_000;

/// What to do, applied by the store in one transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Ledger lines in nominal order; every `Enqueued` line becomes a task.
    pub occurrences: Vec<PlannedOccurrence>,
    /// Tasks to cancel first (overlap policy `replace`).
    pub cancel: Vec<TaskId>,
    /// The buffered occurrence after this plan (`None` clears it).
    pub buffered: Option<Timestamp>,
    /// The first occurrence still to come.
    pub next_fire_at: Option<Timestamp>,
}

impl Plan {
    /// Whether applying the plan would change anything beyond `next_fire_at`.
    pub fn is_empty(&self) -> bool {
        self.occurrences.is_empty() && self.cancel.is_empty()
    }
}

/// At most this many occurrences are examined one by one in one plan; beyond the catch-up
/// window they are counted, not listed.
const MAX_LISTED: usize = 10_000;
/// Occurrences inside the window walked before the walk jumps ahead, from the spacing seen so
/// far, to a little before the ones it keeps (at most [`MAX_JUMPS`] times).
const WALK_BEFORE_JUMP: usize = 20_000;
const MAX_JUMPS: usize = 3;

/// Due occurrences left out of a plan: counted, and recorded as one ledger line.
#[derive(Default)]
struct LeftOut {
    count: u64,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    /// The walk jumped over some: `count` is an estimate.
    estimated: bool,
}

impl LeftOut {
    fn add(&mut self, t: Timestamp) {
        self.count += 1;
        self.first.get_or_insert(t);
        self.last = Some(t);
    }

    fn line(&self, reason: &str) -> Option<PlannedOccurrence> {
        let first = self.first?;
        let last = self.last.unwrap_or(first);
        let detail = if self.estimated {
            format!(
                "missed about {} occurrences from {first} to {last}: {reason}",
                self.count
            )
        } else if self.count > 1 {
            format!(
                "missed {} occurrences from {first} to {last}: {reason}",
                self.count
            )
        } else {
            format!("missed: {reason}")
        };
        Some(PlannedOccurrence::new(
            first,
            OccurrenceOutcome::Missed,
            Some(detail),
        ))
    }
}

/// A plan made ahead of time ([`plan_ahead`]): the plan, and when to plan again.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ahead {
    pub plan: Plan,
    /// When the schedule must be planned again: when its next occurrence comes within the
    /// look-ahead, or, when an outcome depends on a run that has not ended, at that
    /// occurrence's nominal time. `None`: never (a single time that has passed).
    pub look_at: Option<Timestamp>,
    /// An outcome depends on a run of the schedule that has not ended (an occurrence that
    /// cannot be decided before its time, a buffered occurrence, an interval counted from a
    /// run): planning again as soon as a run ends may decide it sooner than `look_at`.
    pub awaits_run: bool,
}

/// Plans every occurrence due at `now`.
pub fn plan(input: &PlanInput<'_>, now: Timestamp) -> Plan {
    plan_ahead(input, now, now).plan
}

/// Plans every occurrence due at `now` as [`plan`] does, then the next occurrence if it comes
/// by `until` and its outcome cannot change before its time, as a task due at its nominal time
/// (plus jitter). One run at a time is made ahead: the one after it is planned once that run
/// is due (half-way to the occurrence after it), so a schedule keeps one row ahead however
/// often it fires. An occurrence to come whose outcome depends on a run that has not ended yet
/// (overlap `skip`, `buffer_one`, `replace` or `allow:N` with runs unfinished) ends the plan:
/// it is decided at its nominal time, or earlier once the runs it waits for end.
pub fn plan_ahead(input: &PlanInput<'_>, now: Timestamp, until: Timestamp) -> Ahead {
    let until = until.max(now);
    let mut placer = Placer::new(input);
    placer.release_buffered();
    if let (Spec::Every(d), IntervalFrom::LastStart | IntervalFrom::LastFinish) =
        (input.spec, input.from)
    {
        return placer.counted_from_last_run(*d, now, until);
    }
    let mut plan = std::mem::take(&mut placer.plan);
    let window_start = now.checked_sub(input.catchup_window).unwrap_or(now);
    let late_before = now.checked_sub(input.misfire_grace).unwrap_or(now);
    let next = |t: Timestamp| input.spec.next_after(t, input.tz, input.anchor);

    let Some(mut n) = input.next_fire_at else {
        placer.plan = plan;
        return placer.finish_ahead(now, until, None);
    };
    // Occurrences before the catch-up window: never run, recorded as one summary line.
    if n < window_start {
        let first = n;
        let mut count = 0u64;
        let mut last = n;
        while n < window_start && count < MAX_LISTED as u64 {
            count += 1;
            last = n;
            match next(n) {
                Some(t) => n = t,
                None => {
                    n = Timestamp::MAX;
                    break;
                }
            }
        }
        if n < window_start {
            // Too many to walk: jump to the first occurrence inside the window.
            match next(
                window_start
                    .checked_sub(SignedDuration::from_nanos(1))
                    .unwrap_or(window_start),
            ) {
                Some(t) => n = t,
                None => n = Timestamp::MAX,
            }
        }
        let detail = if count == 1 && n >= window_start {
            "missed: older than the catch-up window".to_string()
        } else {
            format!(
                "missed {}{count} occurrences from {first} to {last}: older than the catch-up window",
                if count as usize >= MAX_LISTED {
                    "at least "
                } else {
                    ""
                }
            )
        };
        plan.occurrences.push(PlannedOccurrence::new(
            first,
            OccurrenceOutcome::Missed,
            Some(detail),
        ));
    }

    // Occurrences inside the window up to now: the most recent `catchup_limit` of them go
    // through the catch-up policy, older ones are left out.
    let keep = input.catchup_limit.max(1);
    let mut due = std::collections::VecDeque::new();
    let mut left_out = LeftOut::default();
    let (walk_start, mut walked, mut jumps) = (n, 0usize, 0usize);
    while n <= now {
        due.push_back(n);
        if due.len() > keep {
            left_out.add(due.pop_front().expect("more than one"));
        }
        walked += 1;
        match next(n) {
            Some(t) => n = t,
            None => {
                n = Timestamp::MAX;
                break;
            }
        }
        if walked % WALK_BEFORE_JUMP == 0 && n <= now && jumps < MAX_JUMPS {
            // Jump to twice the kept number of occurrences before now, at the spacing seen so
            // far; the last jump keeps only what is on time.
            jumps += 1;
            let spacing = n.duration_since(walk_start) / walked as i32;
            let back = if jumps == MAX_JUMPS {
                input.misfire_grace
            } else {
                spacing
                    .checked_mul(2 * keep as i32)
                    .unwrap_or(input.catchup_window)
            };
            let target = now.checked_sub(back).unwrap_or(now);
            if target > n {
                due.drain(..).for_each(|t| left_out.add(t));
                left_out.estimated = true;
                let skipped = target.duration_since(n).as_secs_f64() / spacing.as_secs_f64();
                if skipped.is_finite() {
                    left_out.count += skipped as u64;
                }
                match target
                    .checked_sub(SignedDuration::from_nanos(1))
                    .ok()
                    .and_then(next)
                {
                    Some(t) => n = t,
                    None => {
                        n = Timestamp::MAX;
                        break;
                    }
                }
            }
        }
    }
    plan.next_fire_at = (n != Timestamp::MAX).then_some(n);
    let reason = match input.catchup {
        CatchupPolicy::All => format!("catch-up all runs at most the latest {keep}"),
        other => format!("catch-up policy {other}"),
    };
    plan.occurrences.extend(left_out.line(&reason));
    let due: Vec<Timestamp> = due.into();

    let late = due.iter().filter(|t| **t < late_before).count();
    let run: Vec<bool> = due
        .iter()
        .enumerate()
        .map(|(i, t)| match input.catchup {
            CatchupPolicy::All => true,
            CatchupPolicy::None => *t >= late_before,
            // One run for the most recent: only the last occurrence runs if any was late.
            CatchupPolicy::Latest => late == 0 || i + 1 == due.len(),
        })
        .collect();

    placer.plan = plan;
    for (t, run) in due.into_iter().zip(run) {
        if run {
            placer.place(t);
        } else {
            placer.plan.occurrences.push(PlannedOccurrence::new(
                t,
                OccurrenceOutcome::Missed,
                Some(format!("missed: catch-up policy {}", input.catchup)),
            ));
        }
    }
    // The next occurrence, if it comes within the look-ahead and can be decided now.
    if let Some(t) = placer.plan.next_fire_at.filter(|t| *t <= until) {
        if placer.place_ahead(t) {
            placer.made_ahead = Some(t);
            placer.plan.next_fire_at = next(t);
        } else {
            placer.stopped_at = Some(t);
        }
    }
    placer.finish_ahead(now, until, None)
}

/// Places due occurrences one by one through the overlap policy, counting the runs that are
/// unfinished.
struct Placer<'i, 'a> {
    input: &'i PlanInput<'a>,
    plan: Plan,
    active: usize,
    /// An occurrence to come that cannot be decided before its time.
    stopped_at: Option<Timestamp>,
    /// The occurrence to come made ahead.
    made_ahead: Option<Timestamp>,
}

impl<'i, 'a> Placer<'i, 'a> {
    fn new(input: &'i PlanInput<'a>) -> Placer<'i, 'a> {
        Placer {
            input,
            plan: Plan {
                buffered: input.buffered,
                ..Plan::default()
            },
            active: input.active_tasks.len(),
            stopped_at: None,
            made_ahead: None,
        }
    }

    /// A buffered occurrence runs as soon as nothing else is active.
    fn release_buffered(&mut self) {
        if let Some(b) = self.plan.buffered {
            if self.active == 0 {
                self.plan.occurrences.push(PlannedOccurrence::new(
                    b,
                    OccurrenceOutcome::Enqueued,
                    Some("released from the buffer".into()),
                ));
                self.plan.buffered = None;
                self.active = 1;
            }
        }
    }

    /// An occurrence due to run: enqueued, or what the overlap policy makes of it.
    fn place(&mut self, t: Timestamp) {
        let input = self.input;
        let plan = &mut self.plan;
        let (outcome, detail) = if self.active == 0 {
            self.active += 1;
            (OccurrenceOutcome::Enqueued, None)
        } else {
            match input.overlap {
                OverlapPolicy::Allow => {
                    self.active += 1;
                    (OccurrenceOutcome::Enqueued, None)
                }
                OverlapPolicy::AllowUpTo(n) if self.active < n as usize => {
                    self.active += 1;
                    (OccurrenceOutcome::Enqueued, None)
                }
                OverlapPolicy::AllowUpTo(n) => (
                    OccurrenceOutcome::Skipped,
                    Some(format!(
                        "skipped: {n} runs were unfinished, the most overlap allow:{n} lets run at once"
                    )),
                ),
                OverlapPolicy::Skip => (
                    OccurrenceOutcome::Skipped,
                    Some("skipped: the previous run had not finished".to_string()),
                ),
                OverlapPolicy::BufferOne if plan.buffered.is_none() => {
                    plan.buffered = Some(t);
                    (
                        OccurrenceOutcome::Buffered,
                        Some("buffered: runs when the previous run ends".to_string()),
                    )
                }
                OverlapPolicy::BufferOne => (
                    OccurrenceOutcome::Skipped,
                    Some("skipped: one run is already buffered".to_string()),
                ),
                OverlapPolicy::Replace => {
                    plan.cancel.extend(input.active_tasks.iter().copied());
                    // Tasks this plan enqueued earlier are replaced by this one instead.
                    for o in plan.occurrences.iter_mut() {
                        if o.outcome == OccurrenceOutcome::Enqueued {
                            o.outcome = OccurrenceOutcome::Skipped;
                            o.detail = Some("skipped: replaced by a later occurrence".into());
                        }
                    }
                    (
                        OccurrenceOutcome::Enqueued,
                        Some("replaced the previous run".to_string()),
                    )
                }
            }
        };
        let run_at = match (outcome, input.jitter) {
            (OccurrenceOutcome::Enqueued, Some(j)) => {
                t.checked_add(jitter_offset(input.name, t, j)).ok()
            }
            _ => None,
        };
        plan.occurrences.push(PlannedOccurrence {
            nominal_at: t,
            outcome,
            detail,
            run_at,
        });
    }

    /// An occurrence to come, made ahead if its outcome cannot change before its time: it runs
    /// unless runs are unfinished then, and runs only end (or are made by this planner) until
    /// then. With unfinished runs under an overlap policy that bounds them, the outcome
    /// depends on whether they end in time: `false`, nothing placed.
    fn place_ahead(&mut self, t: Timestamp) -> bool {
        let room = match self.input.overlap {
            _ if self.active == 0 => true,
            OverlapPolicy::Allow => true,
            OverlapPolicy::AllowUpTo(n) => self.active < n as usize,
            OverlapPolicy::Skip | OverlapPolicy::BufferOne | OverlapPolicy::Replace => false,
        };
        if !room {
            return false;
        }
        self.active += 1;
        let offset = self.input.jitter.map_or(SignedDuration::ZERO, |j| {
            jitter_offset(self.input.name, t, j)
        });
        self.plan.occurrences.push(PlannedOccurrence {
            nominal_at: t,
            outcome: OccurrenceOutcome::Enqueued,
            detail: None,
            run_at: Some(t.checked_add(offset).unwrap_or(t)),
        });
        true
    }

    /// An interval counted from the previous run's start or end: one occurrence is due at a
    /// time, an interval after that run started (or ended), and no sooner than the stored next
    /// fire time. While the run it counts from has not started (or ended) the next fire time
    /// is a time to look again, an interval on: that run cannot start (end) before now, so the
    /// occurrence cannot be due before then, and looking every interval finds it on time.
    fn counted_from_last_run(
        mut self,
        every: SignedDuration,
        now: Timestamp,
        until: Timestamp,
    ) -> Ahead {
        let input = self.input;
        let Some(stored) = input.next_fire_at else {
            return self.finish_ahead(now, until, None);
        };
        let after = |t: Timestamp| t.checked_add(every).ok();
        // A run released from the buffer just now counts as unfinished too.
        let unfinished = self.active > 0;
        let (waiting, last) = match input.from {
            IntervalFrom::LastStart => (
                unfinished && !input.last_run.running,
                input.last_run.started_at,
            ),
            _ => (unfinished, input.last_run.finished_at),
        };
        if waiting {
            // The stored time is only when to look again.
            let look = after(now).map(|t| t.max(stored));
            self.plan.next_fire_at = look;
            return self.finish_ahead(now, until, Some(look));
        }
        let due = last.and_then(after).map_or(stored, |t| t.max(stored));
        if due > until {
            self.plan.next_fire_at = Some(due);
            return self.finish_ahead(now, until, None);
        }
        if due > now {
            if !self.place_ahead(due) {
                self.plan.next_fire_at = Some(due);
                self.stopped_at = Some(due);
                return self.finish_ahead(now, until, None);
            }
            self.made_ahead = Some(due);
        } else {
            let late = now
                .checked_sub(input.misfire_grace)
                .is_ok_and(|grace| due < grace);
            if late && input.catchup == CatchupPolicy::None {
                self.plan.occurrences.push(PlannedOccurrence::new(
                    due,
                    OccurrenceOutcome::Missed,
                    Some("missed: catch-up policy none".into()),
                ));
            } else {
                self.place(due);
            }
        }
        let next = after(due.max(now));
        self.plan.next_fire_at = next;
        // The next occurrence counts from a run not started or ended yet: the stored time is
        // the earliest it can be due, and when to look again (sooner if that run ends here).
        self.finish_ahead(now, until, Some(next))
    }

    /// The plan, and when to plan again: `look` if the caller knows (`Some(None)`: never), else
    /// when the next occurrence comes within the look-ahead (`until - now` before it) but not
    /// before the run made ahead is due and half-way to the next occurrence, or at the nominal
    /// time of an occurrence that could not be decided yet.
    fn finish_ahead(
        mut self,
        now: Timestamp,
        until: Timestamp,
        look: Option<Option<Timestamp>>,
    ) -> Ahead {
        self.plan.cancel.sort_unstable();
        self.plan.cancel.dedup();
        let horizon = until.duration_since(now);
        let look_at = match (look, self.stopped_at) {
            (Some(look), _) => look,
            (None, Some(t)) => Some(t),
            (None, None) => self.plan.next_fire_at.map(|t| {
                let within = t.checked_sub(horizon).unwrap_or(t).max(now);
                match self.made_ahead {
                    Some(m) => within.max(m.checked_add(t.duration_since(m) / 2).unwrap_or(m)),
                    None => within,
                }
            }),
        };
        let awaits_run = self.stopped_at.is_some()
            || (self.plan.buffered.is_some() && self.active > 0)
            || (self.input.from != IntervalFrom::Fixed && self.active > 0);
        Ahead {
            plan: self.plan,
            look_at,
            awaits_run,
        }
    }
}
