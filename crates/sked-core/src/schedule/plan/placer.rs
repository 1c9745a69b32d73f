//! Placing occurrences: each due one through the overlap policy, the next one ahead when its
//! outcome cannot change, intervals counted from the last run, and when to plan again.

use jiff::{SignedDuration, Timestamp};

use super::{Ahead, OccurrenceOutcome, Plan, PlanInput, PlannedOccurrence};
use crate::schedule::{CatchupPolicy, IntervalFrom, OverlapPolicy, jitter_offset};

/// Places due occurrences one by one through the overlap policy, counting the runs that are
/// unfinished.
pub(super) struct Placer<'i, 'a> {
    pub(super) input: &'i PlanInput<'a>,
    pub(super) plan: Plan,
    pub(super) active: usize,
    /// An occurrence to come that cannot be decided before its time.
    pub(super) stopped_at: Option<Timestamp>,
    /// The occurrence to come made ahead.
    pub(super) made_ahead: Option<Timestamp>,
    /// Runs it may still make (see [`PlanInput::runs_left`]).
    runs_left: Option<u64>,
}

impl<'i, 'a> Placer<'i, 'a> {
    pub(super) fn new(input: &'i PlanInput<'a>) -> Placer<'i, 'a> {
        Placer {
            input,
            plan: Plan {
                buffered: input.buffered,
                ..Plan::default()
            },
            active: super::runs_of(input.active_tasks),
            stopped_at: None,
            made_ahead: None,
            runs_left: input.runs_left,
        }
    }

    /// Whether the schedule has made its most runs: nothing more is planned.
    pub(super) fn ended(&self) -> bool {
        self.runs_left == Some(0)
    }

    /// Counts a run made at an occurrence.
    fn made_run(&mut self) {
        self.plan.runs += 1;
        self.runs_left = self.runs_left.map(|n| n.saturating_sub(1));
    }

    /// A buffered occurrence runs as soon as nothing else is active.
    pub(super) fn release_buffered(&mut self) {
        if let Some(b) = self.plan.buffered
            && self.active == 0
        {
            self.plan.occurrences.push(PlannedOccurrence::new(
                b,
                OccurrenceOutcome::Enqueued,
                Some("released from the buffer".into()),
            ));
            self.plan.buffered = None;
            self.active = 1;
            self.made_run();
        }
    }

    /// Records `t` as excluded if it falls on a date of a calendar the schedule skips.
    fn excluded(&mut self, t: Timestamp) -> bool {
        let input = self.input;
        let Some(c) = (input.calendars.iter()).find(|c| c.excludes(t, input.tz)) else {
            return false;
        };
        self.plan.occurrences.push(PlannedOccurrence::new(
            t,
            OccurrenceOutcome::Excluded,
            Some(format!("excluded by calendar {}", c.name)),
        ));
        true
    }

    /// An occurrence due to run: excluded by a calendar, enqueued, or what the overlap policy
    /// makes of it.
    pub(super) fn place(&mut self, t: Timestamp) {
        if self.excluded(t) {
            return;
        }
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
                        "skipped: {n} runs were unfinished{}, the most overlap allow:{n} lets run at once",
                        unfinished(input.active_tasks)
                    )),
                ),
                OverlapPolicy::Skip => (
                    OccurrenceOutcome::Skipped,
                    Some(format!(
                        "skipped: the previous run had not finished{}",
                        unfinished(input.active_tasks)
                    )),
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
                    plan.cancel.extend(input.active_tasks.iter().map(|t| t.id));
                    // Tasks this plan enqueued earlier are replaced by this one instead: they
                    // are not runs.
                    for o in plan.occurrences.iter_mut() {
                        if o.outcome == OccurrenceOutcome::Enqueued {
                            o.outcome = OccurrenceOutcome::Skipped;
                            o.detail = Some("skipped: replaced by a later occurrence".into());
                            plan.runs -= 1;
                            self.runs_left = self.runs_left.map(|n| n + 1);
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
        if outcome == OccurrenceOutcome::Enqueued {
            self.made_run();
        }
    }

    /// An occurrence to come, made ahead if its outcome cannot change before its time (one a
    /// calendar excludes is recorded as such at once): it runs
    /// unless runs are unfinished then, and runs only end (or are made by this planner) until
    /// then. With unfinished runs under an overlap policy that bounds them, the outcome
    /// depends on whether they end in time: `false`, nothing placed.
    pub(super) fn place_ahead(&mut self, t: Timestamp) -> bool {
        if self.excluded(t) {
            return true;
        }
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
        self.made_run();
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
    pub(super) fn counted_from_last_run(
        mut self,
        every: SignedDuration,
        now: Timestamp,
        until: Timestamp,
    ) -> Ahead {
        let input = self.input;
        let Some(stored) = input.next_fire_at.filter(|t| !input.bounds.ended_by(*t)) else {
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
        if input.bounds.ended_by(due) {
            return self.finish_ahead(now, until, Some(None));
        }
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
        let next = after(due.max(now)).filter(|t| !input.bounds.ended_by(*t));
        self.plan.next_fire_at = next;
        // The next occurrence counts from a run not started or ended yet: the stored time is
        // the earliest it can be due, and when to look again (sooner if that run ends here).
        self.finish_ahead(now, until, Some(next))
    }

    /// The plan, and when to plan again: `look` if the caller knows (`Some(None)`: never), else
    /// when the next occurrence comes within the look-ahead (`until - now` before it) but not
    /// before the run made ahead is due and half-way to the next occurrence, or at the nominal
    /// time of an occurrence that could not be decided yet.
    pub(super) fn finish_ahead(
        mut self,
        now: Timestamp,
        until: Timestamp,
        look: Option<Option<Timestamp>>,
    ) -> Ahead {
        self.plan.cancel.sort_unstable();
        self.plan.cancel.dedup();
        let look = match self.ended() {
            // Its last run made: no occurrence is to come, nor one held back.
            true => {
                self.plan.next_fire_at = None;
                self.plan.buffered = None;
                self.stopped_at = None;
                Some(None)
            }
            false => look,
        };
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

/// The unfinished tasks a skip waited for, as a ledger detail says them: ` (task 42, running)`,
/// ` (tasks 41 running, 42 available)`, the first [`NAMED`] of them and how many more;
/// nothing when the run is one this plan made.
fn unfinished(active: &[super::ActiveTask]) -> String {
    const NAMED: usize = 5;
    match active {
        [] => String::new(),
        [t] => format!(" (task {}, {})", t.id, t.state),
        many => {
            let mut each: Vec<String> = (many.iter().take(NAMED))
                .map(|t| format!("{} {}", t.id, t.state))
                .collect();
            if many.len() > NAMED {
                each.push(format!("and {} more", many.len() - NAMED));
            }
            format!(" (tasks {})", each.join(", "))
        }
    }
}
