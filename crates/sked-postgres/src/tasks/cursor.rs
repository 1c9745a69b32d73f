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
//! - the store's own staging moves them back at once, without waiting for its announcement;
//! - and, for what no announcement covers, a claim starts from the front at least once a
//!   second, and no more often than keeps those claims within a twentieth of the time spent
//!   claiming (so a held snapshot cannot make them the bulk of the work).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{Task, TaskId};

/// A task's place in claim order: higher priority first, then earlier run time, then lower id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) priority: i32,
    pub(crate) run_at: Timestamp,
    pub(crate) id: TaskId,
}

impl Key {
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

    pub(crate) fn order(&self) -> (Reverse<i32>, Timestamp, TaskId) {
        (Reverse(self.priority), self.run_at, self.id)
    }
}

/// Where one set of queues and kinds resumes.
#[derive(Debug, Default)]
struct Position {
    /// Claims start after this key; `None`: at the front.
    after: Option<Key>,
    /// When the next claim starts at the front whatever `after` says.
    front_due: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counts the moves back, so that a claim that began before one does not undo it.
    epoch: u64,
    positions: HashMap<String, Position>,
}

/// The positions of one store's claims.
#[derive(Debug, Default)]
pub(crate) struct ClaimCursors {
    inner: Mutex<Inner>,
}

/// What a claim started from (handed back to [`ClaimCursors::finish`]).
#[derive(Debug)]
pub(crate) struct Start {
    /// Claim the tasks after this key; `None`: from the front.
    pub(crate) after: Option<Key>,
    filter: String,
    epoch: u64,
}

/// The shortest and the longest time between claims from the front.
const FRONT_EVERY: SignedDuration = SignedDuration::from_secs(1);
/// Claims from the front take at most this share of the time (1/20).
const FRONT_SHARE: u32 = 20;

impl ClaimCursors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is a few plain values, consistent after every statement: a panic elsewhere
        // while it was held cannot have left it half-changed.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a claim for `filter` (its queues and kinds) starts at `now`.
    pub(crate) fn start(&self, filter: &str, now: Timestamp) -> Start {
        let mut inner = self.lock();
        let epoch = inner.epoch;
        let after = match inner.positions.get_mut(filter) {
            Some(p) if p.front_due.is_some_and(|due| now < due) => p.after,
            Some(p) => {
                // One claim from the front at a time: claims that start while it runs resume
                // from the position (it sets the next time when it ends).
                p.front_due = Some(now.saturating_add(FRONT_EVERY).unwrap_or(Timestamp::MAX));
                None
            }
            None => None,
        };
        Start {
            after,
            filter: filter.to_owned(),
            epoch,
        }
    }

    /// Records a claim's end: `last`, the last task it took in claim order, and `took`, how
    /// long the claim ran.
    pub(crate) fn finish(&self, start: Start, last: Option<Key>, now: Timestamp, took: Duration) {
        let mut inner = self.lock();
        let unchanged = inner.epoch == start.epoch;
        let position = inner.positions.entry(start.filter).or_default();
        if start.after.is_none() {
            let wait = SignedDuration::try_from(took * FRONT_SHARE)
                .unwrap_or(SignedDuration::MAX)
                .max(FRONT_EVERY);
            position.front_due = Some(now.saturating_add(wait).unwrap_or(Timestamp::MAX));
        }
        let Some(last) = last.filter(|_| unchanged) else {
            return;
        };
        // A claim from the front took what it found first, missed tasks included, and there
        // may be more of those up to where claims had got to: carry on from what it took.
        // Claims that ran side by side from a position: the furthest one counts.
        if start.after.is_none() || position.after.is_none_or(|a| a.order() < last.order()) {
            position.after = Some(last);
        }
    }

    /// Tasks from `bound` on may have become available: claims start there at the latest.
    pub(crate) fn move_back(&self, bound: Key) {
        let mut inner = self.lock();
        inner.epoch += 1;
        for position in inner.positions.values_mut() {
            if position.after.is_some_and(|a| bound.order() < a.order()) {
                position.after = Some(bound);
            }
        }
    }

    /// Anything may have become available: claims start at the front.
    pub(crate) fn forget(&self) {
        let mut inner = self.lock();
        inner.epoch += 1;
        for position in inner.positions.values_mut() {
            position.after = None;
        }
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
        let cursors = ClaimCursors::default();
        let first = cursors.start("all", at(0));
        assert_eq!(first.after, None, "the first claim starts at the front");
        cursors.finish(first, Some(key(0, 5, 7)), at(0), Duration::from_millis(1));
        assert_eq!(cursors.start("all", at(0)).after, Some(key(0, 5, 7)));
        assert_eq!(cursors.start("other", at(0)).after, None, "per filter");
        // A claim that took nothing leaves the position where it was.
        let s = cursors.start("all", at(0));
        cursors.finish(s, None, at(0), Duration::from_millis(1));
        assert_eq!(cursors.start("all", at(0)).after, Some(key(0, 5, 7)));
        // Concurrent claims: the furthest one wins.
        let (a, b) = (cursors.start("all", at(0)), cursors.start("all", at(0)));
        cursors.finish(b, Some(key(0, 9, 1)), at(0), Duration::ZERO);
        cursors.finish(a, Some(key(0, 6, 1)), at(0), Duration::ZERO);
        assert_eq!(cursors.start("all", at(0)).after, Some(key(0, 9, 1)));
        // A claim from the front carries on from what it took, even behind the position.
        let front = cursors.start("all", at(5));
        assert_eq!(front.after, None);
        cursors.finish(front, Some(key(0, 2, 3)), at(5), Duration::ZERO);
        assert_eq!(cursors.start("all", at(5)).after, Some(key(0, 2, 3)));
    }

    #[test]
    fn announcements_move_positions_back_never_forward() {
        let cursors = ClaimCursors::default();
        let s = cursors.start("all", at(0));
        cursors.finish(s, Some(key(0, 5, 7)), at(0), Duration::ZERO);
        cursors.move_back(Key::before(0, at(9)));
        assert_eq!(cursors.start("all", at(0)).after, Some(key(0, 5, 7)));
        cursors.move_back(Key::before(0, at(3)));
        assert_eq!(
            cursors.start("all", at(0)).after,
            Some(Key::before(0, at(3)))
        );
        // A higher priority comes first whatever its run time.
        cursors.move_back(Key::before(5, at(100)));
        assert_eq!(
            cursors.start("all", at(0)).after,
            Some(Key::before(5, at(100)))
        );
        cursors.forget();
        assert_eq!(cursors.start("all", at(0)).after, None);
    }

    #[test]
    fn a_claim_that_began_before_a_move_back_does_not_undo_it() {
        let cursors = ClaimCursors::default();
        let s = cursors.start("all", at(0));
        cursors.finish(s, Some(key(0, 5, 7)), at(0), Duration::ZERO);
        let running = cursors.start("all", at(0));
        cursors.move_back(Key::before(0, at(1)));
        cursors.finish(running, Some(key(0, 8, 1)), at(0), Duration::ZERO);
        assert_eq!(
            cursors.start("all", at(0)).after,
            Some(Key::before(0, at(1)))
        );
    }

    #[test]
    fn claims_start_at_the_front_every_second_or_twenty_times_their_cost() {
        let cursors = ClaimCursors::default();
        let s = cursors.start("all", at(0));
        cursors.finish(s, Some(key(0, 5, 7)), at(0), Duration::from_millis(2));
        assert!(cursors.start("all", at(0)).after.is_some());
        let front = cursors.start("all", at(1));
        assert_eq!(front.after, None, "a second later");
        assert!(
            cursors.start("all", at(1)).after.is_some(),
            "one claim from the front at a time"
        );
        cursors.finish(front, Some(key(0, 6, 1)), at(1), Duration::from_millis(2));
        // A front claim that took 500 ms: the next one no sooner than 10 s on.
        let s = cursors.start("all", at(2));
        assert_eq!(s.after, None);
        cursors.finish(s, Some(key(0, 6, 1)), at(2), Duration::from_millis(500));
        assert!(cursors.start("all", at(11)).after.is_some());
        assert_eq!(cursors.start("all", at(12)).after, None);
    }
}
