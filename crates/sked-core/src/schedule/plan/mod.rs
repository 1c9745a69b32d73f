//! Materialisation planning: given a schedule's pending occurrences, the time now and what is
//! still running, decide which occurrences become tasks and which are recorded as skipped,
//! buffered or missed. Pure: the engine reads the inputs, the store applies the plan atomically.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use super::{Bounds, CatchupPolicy, IntervalFrom, OverlapPolicy, Spec};
use crate::task::TaskId;
use placer::Placer;

mod placer;

/// How an occurrence ended up, as recorded in the schedule's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Not run: it falls on a date of a calendar the schedule skips.
    Excluded,
}

impl OccurrenceOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            OccurrenceOutcome::Enqueued => "enqueued",
            OccurrenceOutcome::Skipped => "skipped",
            OccurrenceOutcome::Buffered => "buffered",
            OccurrenceOutcome::Missed => "missed",
            OccurrenceOutcome::Excluded => "excluded",
        }
    }

    pub fn parse(s: &str) -> Option<OccurrenceOutcome> {
        [
            Self::Enqueued,
            Self::Skipped,
            Self::Buffered,
            Self::Missed,
            Self::Excluded,
        ]
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

/// An unfinished task of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveTask {
    pub id: TaskId,
    pub state: crate::TaskState,
    /// The occurrence it runs for: the tasks of a workflow run share it. `None` counts as a
    /// run of its own.
    pub run: Option<Timestamp>,
}

impl ActiveTask {
    /// A task that is a run of its own.
    pub fn new(id: TaskId, state: crate::TaskState) -> ActiveTask {
        ActiveTask {
            id,
            state,
            run: None,
        }
    }
}

/// How many runs these unfinished tasks are.
pub fn runs_of(active: &[ActiveTask]) -> usize {
    let mut runs: Vec<Timestamp> = active.iter().filter_map(|t| t.run).collect();
    runs.sort_unstable();
    runs.dedup();
    runs.len() + active.iter().filter(|t| t.run.is_none()).count()
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
    /// The schedule's unfinished tasks, oldest first, with their states and runs. The overlap
    /// policy counts runs: the tasks of one workflow run are one.
    pub active_tasks: &'a [ActiveTask],
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
    /// When the schedule may fire: no occurrence outside these is planned or recorded.
    pub bounds: Bounds,
    /// How many more runs it may make at its occurrences (`max_runs` less the runs made);
    /// `None`: no limit. At 0 it has ended: nothing more is planned.
    pub runs_left: Option<u64>,
    /// Calendars whose dates it does not fire on.
    pub calendars: &'a [&'a crate::Calendar],
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
    /// The runs this plan makes at the schedule's occurrences, which `max_runs` counts (a run
    /// a later occurrence replaced in the same plan is not one).
    pub runs: u64,
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
    if placer.ended() {
        return placer.finish_ahead(now, until, None);
    }
    placer.release_buffered();
    if let (Spec::Every(d), IntervalFrom::LastStart | IntervalFrom::LastFinish) =
        (input.spec, input.from)
    {
        return placer.counted_from_last_run(*d, now, until);
    }
    let mut plan = std::mem::take(&mut placer.plan);
    let window_start = now.checked_sub(input.catchup_window).unwrap_or(now);
    let late_before = now.checked_sub(input.misfire_grace).unwrap_or(now);
    let next = |t: Timestamp| (input.bounds).next_after(input.spec, t, input.tz, input.anchor);

    let first = input
        .next_fire_at
        .and_then(|n| (input.bounds).first_from(n, input.spec, input.tz, input.anchor));
    let Some(mut n) = first else {
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
        if placer.ended() {
            break;
        }
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
    if let Some(t) = placer
        .plan
        .next_fire_at
        .filter(|t| *t <= until && !placer.ended())
    {
        if placer.place_ahead(t) {
            placer.made_ahead = Some(t);
            placer.plan.next_fire_at = next(t);
        } else {
            placer.stopped_at = Some(t);
        }
    }
    placer.finish_ahead(now, until, None)
}
