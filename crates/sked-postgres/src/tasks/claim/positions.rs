//! Where a store's next claim starts in the claim index.
//!
//! A claim walks the claim index (available tasks in claim order) from its start. Every task
//! claimed leaves its entry behind until vacuum removes it, and while any transaction holds an
//! old snapshot (a long report, a session left idle in a transaction) vacuum cannot. A claim
//! that starts at the front then visits, one heap page each, every task claimed since that
//! snapshot: with a million claimed, hundreds of milliseconds per claim.
//!
//! So a store remembers, per set of queues and kinds, the claim-order key of the last task it
//! claimed and starts the next claim just after it. Tasks can appear before that key (a higher
//! priority, an earlier run time, a task another transaction held while the claim passed it):
//!
//! - every statement that makes tasks available announces the highest priority and the
//!   earliest run time among them (see [`crate::listen`]), and the announcement moves every
//!   position back to that bound (an announcement without them, or a lost listener, moves
//!   them to the front);
//! - the store's own changes and staging move them back at once, without waiting for their
//!   announcement;
//! - and, for what no announcement covers, a probe beside the claims looks for the first
//!   claimable task from the front, once a second, or less often when it is slow, so that
//!   probes take at most a twentieth of the time (with a snapshot held, it walks everything
//!   claimed since); when that task lies before the position, claims move back to it. The
//!   probe runs apart from the claims, so its walk never holds up a claim.
//!
//! The same state keeps what [`super::next_due`] describes (when the next waiting task is due,
//! the queue settings), moved by the same announcements.

pub(crate) use super::next_due::{NextDue, QueueSetting};

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{Task, TaskId};
use sked_store::TaskClaimParams;

/// The queues and kinds of a claim, as its position and its turns know them.
pub(crate) fn filter_key(p: &TaskClaimParams) -> String {
    format!("{:?} {:?}", p.queues, p.kinds)
}

/// A task's place in claim order: higher priority first, then earlier run time, then lower id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) priority: i32,
    pub(crate) run_at: Timestamp,
    pub(crate) id: TaskId,
}

impl Key {
    /// After every task: where claims resume once one walked to the end of the claimable tasks.
    pub(crate) const END: Key = Key {
        priority: i32::MIN,
        run_at: Timestamp::MAX,
        id: TaskId::MAX,
    };

    pub(crate) fn of(task: &Task) -> Key {
        Key {
            priority: task.priority,
            run_at: task.run_at,
            id: task.id,
        }
    }

    /// Just before every task of `priority` due at `run_at` or later.
    pub(crate) fn before(priority: i32, run_at: Timestamp) -> Key {
        Key {
            priority,
            run_at,
            id: TaskId::MIN,
        }
    }

    /// A bound just before both this and `other`: the higher priority, the earlier run time.
    pub(crate) fn covering(self, other: Key) -> Key {
        Key::before(
            self.priority.max(other.priority),
            self.run_at.min(other.run_at),
        )
    }

    pub(crate) fn order(&self) -> (Reverse<i32>, Timestamp, TaskId) {
        (Reverse(self.priority), self.run_at, self.id)
    }

    /// The position just before this key (claims after it start with this task).
    fn just_before(&self) -> Key {
        Key {
            id: self.id.saturating_sub(1),
            ..*self
        }
    }
}

/// Where one set of queues and kinds resumes.
#[derive(Debug, Default)]
struct Position {
    /// Claims start after this key; `None`: at the front.
    after: Option<Key>,
    /// When the next probe from the front is due (`None`: at the next claim).
    probe_due: Option<Timestamp>,
    /// A probe is under way.
    probing: bool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counts the moves back, so that a claim that began before one does not undo it (nor
    /// record what it learnt from statements that may not have seen what was announced).
    epoch: u64,
    positions: HashMap<String, Position>,
    /// When the earliest waiting task is due (see [`super::next_due`]).
    next_due: NextDue,
    /// The queue settings a claim needs, and when they were read (`None`: read them).
    settings: Option<(Vec<QueueSetting>, Timestamp)>,
    /// The last claim that looked found no released part of a kept stage, and nothing was
    /// released since: claims leave parts out (see [`ClaimPositions::parts_may_exist`]).
    no_parts: bool,
}

/// The positions of one store's claims, and what they know between claims.
#[derive(Debug, Default)]
pub(crate) struct ClaimPositions {
    inner: Mutex<Inner>,
}

/// What a claim started from (handed back to [`ClaimPositions::finish`]).
#[derive(Debug)]
pub(crate) struct Start {
    /// Claim the tasks after this key; `None`: from the front.
    pub(crate) after: Option<Key>,
    /// This claim starts a probe from the front (see [`ClaimPositions::probed`]).
    pub(crate) probe: bool,
    filter: String,
    epoch: u64,
}

/// The shortest time between probes from the front.
const PROBE_EVERY: SignedDuration = SignedDuration::from_secs(1);
/// Probes take at most this share of the time (1/20).
const PROBE_SHARE: u32 = 20;

impl ClaimPositions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few plain values, consistent after every statement: a panic elsewhere
        // while it was held cannot have left it half-changed.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a claim for `filter` (its queues and kinds) starts at `now`, and whether it is
    /// time for a probe.
    pub(crate) fn start(&self, filter: &str, now: Timestamp) -> Start {
        let mut inner = self.lock();
        let epoch = inner.epoch;
        let (after, probe) = match inner.positions.get_mut(filter) {
            Some(p) => {
                let probe =
                    p.after.is_some() && !p.probing && p.probe_due.is_none_or(|due| now >= due);
                p.probing |= probe;
                (p.after, probe)
            }
            None => (None, false),
        };
        Start {
            after,
            probe,
            filter: filter.to_owned(),
            epoch,
        }
    }

    /// Records a claim's end: `last`, the last task it took in claim order; `exhausted` when
    /// the claim (or a walk of one limited queue, see [`super::limited`]) took fewer than it
    /// asked for, over every priority: it reached the end, and the next one need not pass over
    /// the same entries again (the tasks of limited and paused queues, for a claim) until
    /// something is announced before the end or a probe finds a task there.
    pub(crate) fn finish(&self, start: Start, last: Option<Key>, exhausted: bool) {
        let mut inner = self.lock();
        let unchanged = inner.epoch == start.epoch;
        let position = inner.positions.entry(start.filter).or_default();
        let last = if exhausted { Some(Key::END) } else { last };
        let Some(last) = last.filter(|_| unchanged) else {
            return;
        };
        // Claims that ran side by side from a position: the furthest one counts. A claim
        // from the front took the first tasks there were: carry on from there.
        if start.after.is_none() || position.after.is_none_or(|a| a.order() < last.order()) {
            position.after = Some(last);
        }
    }

    /// Records a probe's end: `first`, the first claimable task from the front (`None`: there
    /// is none, or the probe failed), as the probe's snapshot saw it, when claims were at
    /// `seen` (the position when it started); it started at `now` and took `took`. Only a task
    /// before `seen` was missed: tasks claimed while the probe walked look claimable to it.
    pub(crate) fn probed(
        &self,
        filter: &str,
        first: Option<Key>,
        seen: Option<Key>,
        now: Timestamp,
        took: Duration,
    ) {
        let mut inner = self.lock();
        let Some(position) = inner.positions.get_mut(filter) else {
            return;
        };
        position.probing = false;
        let wait = SignedDuration::try_from(took * (PROBE_SHARE + 1))
            .unwrap_or(SignedDuration::MAX)
            .max(PROBE_EVERY);
        position.probe_due = Some(now.saturating_add(wait).unwrap_or(Timestamp::MAX));
        let missed = first.filter(|f| seen.is_some_and(|s| f.order() <= s.order()));
        if let (Some(first), Some(after)) = (missed, position.after)
            && first.order() <= after.order()
        {
            position.after = Some(first.just_before());
            // Claims under way began further on: they must not undo it.
            inner.epoch += 1;
        }
    }

    /// Tasks from `bound` on may have become available (or will when staged): claims start
    /// there at the latest.
    pub(crate) fn move_back(&self, bound: Key) {
        let mut inner = self.lock();
        inner.epoch += 1;
        for position in inner.positions.values_mut() {
            if position.after.is_some_and(|a| bound.order() < a.order()) {
                position.after = Some(bound);
            }
        }
    }

    /// A task waits until `at`: staging runs by then.
    pub(crate) fn waiting(&self, at: Timestamp) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.next_due.lower(at);
    }

    /// Whether claims look at released parts of kept stages: unless the last claim that
    /// looked found none and no task was released since, by this store (see [`Self::released`])
    /// or, as its announcement says, by any node ([`Self::forget`]). A claim without them is
    /// the claim of rows alone, which costs a drain less.
    pub(crate) fn parts_may_exist(&self) -> bool {
        !self.lock().no_parts
    }

    /// Records whether a claim that began as `start` and looked at parts found any; dropped
    /// when anything was released or announced meanwhile.
    pub(crate) fn looked_at_parts(&self, start: &Start, found: bool) {
        let mut inner = self.lock();
        if inner.epoch == start.epoch {
            inner.no_parts = !found;
        }
    }

    /// This store released waiting tasks: some may be in released parts.
    pub(crate) fn released(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.no_parts = false;
    }

    /// Anything may have changed: claims start at the front, stage, read the queue settings
    /// again and look at parts.
    pub(crate) fn forget(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        inner.no_parts = false;
        inner.next_due = NextDue::Unknown;
        inner.settings = None;
        for position in inner.positions.values_mut() {
            position.after = None;
        }
    }

    /// The queues claimed under their row's lock (a concurrency or per-key limit, or a rate
    /// with a burst), as the queue settings last read say (`None` when they are not known).
    pub(crate) fn locked_queues(&self) -> Option<Vec<String>> {
        let inner = self.lock();
        let (settings, _) = inner.settings.as_ref()?;
        let locked = settings
            .iter()
            .filter(|(_, _, limited)| *limited == Some(super::next_due::Limited::Lock))
            .map(|(name, _, _)| name.clone());
        Some(locked.collect())
    }

    /// Whether a claim at `now` stages due waiting tasks first, whether a waiting task is known
    /// to be due ([`NextDue::known_due`]), and the queue settings, if known and read within
    /// [`super::next_due::REFRESH`].
    pub(crate) fn before_claim(&self, now: Timestamp) -> (bool, bool, Option<Vec<QueueSetting>>) {
        let inner = self.lock();
        let settings = inner.settings.as_ref().and_then(|(s, read)| {
            (now < read
                .saturating_add(super::next_due::REFRESH)
                .unwrap_or(Timestamp::MAX))
            .then(|| s.clone())
        });
        (
            inner.next_due.stage(now),
            inner.next_due.known_due(now),
            settings,
        )
    }

    /// Records what a claim that began as `start` learnt: when the next waiting task is due
    /// after its staging (if it staged), and the queue settings (if it read them). Dropped if
    /// anything was announced meanwhile, which the claim's statements may not have seen.
    pub(crate) fn learnt(
        &self,
        start: &Start,
        next_due: Option<NextDue>,
        settings: Option<Vec<QueueSetting>>,
        now: Timestamp,
    ) {
        let mut inner = self.lock();
        if inner.epoch != start.epoch {
            return;
        }
        if let Some(next) = next_due {
            inner.next_due = next;
        }
        if let Some(settings) = settings {
            inner.settings = Some((settings, now));
        }
    }
}

/// The listener's announcements move claims back and say when waiting tasks are due.
impl crate::listen::ClaimHints for ClaimPositions {
    fn announced(&self, first: Option<crate::listen::Announced>, waiting: Option<Timestamp>) {
        match first {
            Some(first) => {
                self.move_back(Key::before(first.priority, first.run_at));
                if let Some(at) = waiting {
                    self.waiting(at);
                }
            }
            None => self.forget(),
        }
    }

    fn missed(&self) {
        self.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn key(priority: i32, s: i64, id: TaskId) -> Key {
        Key {
            priority,
            run_at: at(s),
            id,
        }
    }

    #[test]
    fn claims_resume_after_the_last_task_taken() {
        let positions = ClaimPositions::default();
        let first = positions.start("all", at(0));
        assert_eq!(first.after, None, "the first claim starts at the front");
        assert!(!first.probe);
        positions.finish(first, Some(key(0, 5, 7)), false);
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 5, 7)));
        assert_eq!(positions.start("other", at(0)).after, None, "per filter");
        // A claim that took nothing leaves the position where it was.
        let s = positions.start("all", at(0));
        positions.finish(s, None, false);
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 5, 7)));
        // Concurrent claims: the furthest one wins.
        let (a, b) = (positions.start("all", at(0)), positions.start("all", at(0)));
        positions.finish(b, Some(key(0, 9, 1)), false);
        positions.finish(a, Some(key(0, 6, 1)), false);
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 9, 1)));
        // A claim from the front carries on from what it took, even behind the position.
        positions.forget();
        let front = positions.start("all", at(5));
        assert_eq!(front.after, None);
        positions.finish(front, Some(key(0, 2, 3)), false);
        assert_eq!(positions.start("all", at(5)).after, Some(key(0, 2, 3)));
    }

    #[test]
    fn announcements_move_positions_back_never_forward() {
        let positions = ClaimPositions::default();
        let s = positions.start("all", at(0));
        positions.finish(s, Some(key(0, 5, 7)), false);
        positions.move_back(Key::before(0, at(9)));
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 5, 7)));
        positions.move_back(Key::before(0, at(3)));
        assert_eq!(
            positions.start("all", at(0)).after,
            Some(Key::before(0, at(3)))
        );
        // A higher priority comes first whatever its run time.
        positions.move_back(Key::before(5, at(100)));
        assert_eq!(
            positions.start("all", at(0)).after,
            Some(Key::before(5, at(100)))
        );
        positions.forget();
        assert_eq!(positions.start("all", at(0)).after, None);
    }

    #[test]
    fn claims_leave_parts_out_only_after_one_found_none_and_nothing_was_released() {
        let positions = ClaimPositions::default();
        assert!(positions.parts_may_exist(), "not known at first");
        let s = positions.start("all", at(0));
        positions.looked_at_parts(&s, false);
        assert!(!positions.parts_may_exist());
        positions.released();
        assert!(
            positions.parts_may_exist(),
            "after this store released tasks"
        );
        let s = positions.start("all", at(0));
        positions.looked_at_parts(&s, true);
        assert!(positions.parts_may_exist(), "a claim found some");
        // A claim that began before a release or an announcement does not clear it.
        for change in [ClaimPositions::released, ClaimPositions::forget] {
            let s = positions.start("all", at(0));
            change(&positions);
            positions.looked_at_parts(&s, false);
            assert!(positions.parts_may_exist());
        }
        let s = positions.start("all", at(0));
        positions.looked_at_parts(&s, false);
        positions.forget();
        assert!(
            positions.parts_may_exist(),
            "after an announcement without bounds"
        );
    }

    #[test]
    fn a_claim_that_began_before_a_move_back_does_not_undo_it() {
        let positions = ClaimPositions::default();
        let s = positions.start("all", at(0));
        positions.finish(s, Some(key(0, 5, 7)), false);
        let running = positions.start("all", at(0));
        positions.move_back(Key::before(0, at(1)));
        positions.finish(running, Some(key(0, 8, 1)), false);
        assert_eq!(
            positions.start("all", at(0)).after,
            Some(Key::before(0, at(1)))
        );
    }

    #[test]
    fn probes_run_one_at_a_time_every_second_or_twenty_times_their_cost() {
        let positions = ClaimPositions::default();
        let s = positions.start("all", at(0));
        positions.finish(s, Some(key(0, 5, 7)), false);
        let s = positions.start("all", at(0));
        assert!(s.probe, "the first claim from a position starts a probe");
        assert_eq!(s.after, Some(key(0, 5, 7)), "and claims from the position");
        assert!(!positions.start("all", at(0)).probe, "one probe at a time");
        // Nothing claimable before the position: it stays; the next probe a second later.
        let seen = Some(key(0, 5, 7));
        positions.probed(
            "all",
            Some(key(0, 9, 1)),
            seen,
            at(0),
            Duration::from_millis(2),
        );
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 5, 7)));
        assert!(!positions.start("all", at(0)).probe);
        assert!(positions.start("all", at(1)).probe);
        // A task before the position (one another transaction held while claims passed it):
        // claims move back to it. The probe took 500 ms: the next no sooner than 10.5 s on.
        positions.probed(
            "all",
            Some(key(0, 2, 3)),
            seen,
            at(1),
            Duration::from_millis(500),
        );
        assert_eq!(positions.start("all", at(1)).after, Some(key(0, 2, 2)));
        assert!(!positions.start("all", at(11)).probe);
        let s = positions.start("all", at(12));
        assert!(s.probe);
        // Claims went on while that probe walked: what they took since it began looks
        // claimable to it, and is not missed.
        let c = positions.start("all", at(12));
        positions.finish(c, Some(key(0, 8, 1)), false);
        positions.probed("all", Some(key(0, 3, 1)), s.after, at(12), Duration::ZERO);
        assert_eq!(positions.start("all", at(12)).after, Some(key(0, 8, 1)));
    }

    #[test]
    fn a_claim_under_way_does_not_undo_a_probes_move_back() {
        let positions = ClaimPositions::default();
        let s = positions.start("all", at(0));
        positions.finish(s, Some(key(0, 5, 7)), false);
        let probing = positions.start("all", at(0));
        assert!(probing.probe);
        let claiming = positions.start("all", at(0));
        positions.probed(
            "all",
            Some(key(0, 2, 3)),
            probing.after,
            at(0),
            Duration::ZERO,
        );
        positions.finish(claiming, Some(key(0, 9, 1)), false);
        assert_eq!(positions.start("all", at(0)).after, Some(key(0, 2, 2)));
    }

    #[test]
    fn a_short_claim_resumes_after_the_end_until_a_task_is_announced_or_probed_before_it() {
        let positions = ClaimPositions::default();
        let first = positions.start("q", at(10));
        positions.finish(first, Some(key(0, 5, 7)), false);
        // Walked to the end: the next claim passes over nothing...
        let next = positions.start("q", at(10));
        assert_eq!(next.after, Some(key(0, 5, 7)));
        assert!(next.probe, "a probe looks from the front beside it");
        positions.finish(next, Some(key(0, 6, 1)), true);
        assert_eq!(positions.start("q", at(10)).after, Some(Key::END));
        // ...until the probe finds a task before the end (one passed over while locked),
        positions.probed(
            "q",
            Some(key(0, 4, 3)),
            Some(Key::END),
            at(10),
            Duration::ZERO,
        );
        assert_eq!(positions.start("q", at(10)).after, Some(key(0, 4, 2)));
        // or a task is announced before it.
        positions.finish(positions.start("q", at(10)), None, true);
        assert_eq!(positions.start("q", at(10)).after, Some(Key::END));
        positions.move_back(Key::before(0, at(8)));
        assert_eq!(
            positions.start("q", at(10)).after,
            Some(Key::before(0, at(8)))
        );
    }
}
