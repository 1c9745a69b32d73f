//! A choice between two statements that do the same work, by how long each took per row.
//!
//! A large batch of successes can find its rows in two ways ([`super::endings`]): reading the
//! index of running tasks whole and joining the batch to it by hash, or looking each task up
//! by its key. The first is the faster one while that index holds about the tasks that run
//! (a drain in batches of 1,000 ran 1.15 times as fast with it). While a snapshot is held on
//! the database (a long report, a session left idle in a transaction), the index keeps an
//! entry for every task that ran since, which vacuum cannot remove yet, and its read grows
//! with the snapshot's age: 261 ms a batch after half an hour at 1,000 tasks a second, where
//! the lookups by key stay a few milliseconds. Neither statistics nor the plan tell that
//! apart in time, so the store measures.
//!
//! Each choice runs the statement measured cheaper per row the last time it ran (the second
//! only when it took less than half the first's time); the other is run again once it is due
//! (never measured yet, or twenty times its last duration after it, and at least a second),
//! so that a change in the database is noticed, and a statement that became slow takes at
//! most a twentieth of the time.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One statement's last measure.
#[derive(Debug, Clone, Copy, Default)]
struct Measure {
    /// How long it took per row, the last time it ran; `None`: never ran.
    per_row: Option<Duration>,
    /// When it is due to run again whichever is cheaper.
    due: Option<Instant>,
}

/// The shortest time between two runs of the statement not chosen.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A statement not chosen runs at most this share of the time (1/20).
const RETRY_SHARE: u32 = 20;
/// The second statement is chosen only when it took less than half the first's time per row.
/// Where they cost about the same, which one measures cheaper changes from batch to batch,
/// and the second, lookups by key in parts, sent in one transaction, took a drain to 0.90
/// (rounds 0.82–0.97) by coming up half the time; while a snapshot is held, the first takes
/// ten times as long and more.
const SECOND_MARGIN: u32 = 2;

/// Two statements, `0` and `1`, that do the same work; `0` runs first.
#[derive(Debug, Default)]
pub(crate) struct PlanChoice {
    measures: Mutex<[Measure; 2]>,
}

impl PlanChoice {
    fn lock(&self) -> std::sync::MutexGuard<'_, [Measure; 2]> {
        // Plain values, whole after every assignment: a panic elsewhere cannot leave them
        // half-changed.
        self.measures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The statement to run at `now`: the one that was cheaper per row (the second by half),
    /// unless the other is due to be measured again.
    pub(crate) fn pick(&self, now: Instant) -> usize {
        let m = self.lock();
        let (Some(a), Some(b)) = (m[0].per_row, m[1].per_row) else {
            return usize::from(m[0].per_row.is_some());
        };
        let cheaper = usize::from(b.saturating_mul(SECOND_MARGIN) < a);
        let other = 1 - cheaper;
        match m[other].due.is_some_and(|due| now >= due) {
            true => other,
            false => cheaper,
        }
    }

    /// Records that statement `which` did its work on `rows` rows in `took`, ending at `now`.
    pub(crate) fn record(&self, which: usize, rows: usize, took: Duration, now: Instant) {
        let per_row = took / u32::try_from(rows.max(1)).unwrap_or(u32::MAX);
        let wait = took.saturating_mul(RETRY_SHARE).max(RETRY_EVERY);
        self.lock()[which] = Measure {
            per_row: Some(per_row),
            due: now.checked_add(wait),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_statement_is_measured_first() {
        let choice = PlanChoice::default();
        let t0 = Instant::now();
        assert_eq!(choice.pick(t0), 0);
        choice.record(0, 1000, 10 * MS, t0);
        assert_eq!(choice.pick(t0), 1, "the second has not run yet");
        choice.record(1, 1000, 12 * MS, t0);
        assert_eq!(choice.pick(t0), 0, "the cheaper per row");
    }

    #[test]
    fn the_second_is_chosen_only_at_half_the_first_s_time() {
        let choice = PlanChoice::default();
        let t0 = Instant::now();
        choice.record(0, 1000, 10 * MS, t0);
        choice.record(1, 1000, 6 * MS, t0);
        assert_eq!(choice.pick(t0), 0);
        choice.record(1, 1000, 5 * MS, t0);
        assert_eq!(choice.pick(t0), 0);
        choice.record(1, 1000, 4 * MS, t0);
        assert_eq!(choice.pick(t0), 1);
    }

    #[test]
    fn the_cheaper_per_row_runs_and_the_other_again_when_due() {
        let choice = PlanChoice::default();
        let t0 = Instant::now();
        // The first became slow: 260 ms for 1,000 rows; the second 5 ms for 500.
        choice.record(0, 1000, 260 * MS, t0);
        choice.record(1, 500, 5 * MS, t0);
        assert_eq!(choice.pick(t0), 1);
        assert_eq!(choice.pick(t0 + 5 * MS * 20), 1);
        // Twenty times its 260 ms after it, the first runs again.
        assert_eq!(choice.pick(t0 + 5199 * MS), 1);
        assert_eq!(choice.pick(t0 + 5200 * MS), 0);
        // It is fast again (the snapshot was let go): the cheaper per row. The second ran
        // more than a second before, so it is measured once more, then the first is chosen.
        let t1 = t0 + 5210 * MS;
        choice.record(0, 1000, 8 * MS, t1);
        assert_eq!(choice.pick(t1), 1);
        choice.record(1, 1000, 12 * MS, t1);
        assert_eq!(choice.pick(t1), 0);
        assert_eq!(choice.pick(t1 + 999 * MS), 0);
    }

    #[test]
    fn a_statement_not_chosen_runs_again_at_least_a_second_after_it_ran() {
        let choice = PlanChoice::default();
        let t0 = Instant::now();
        choice.record(0, 1000, 10 * MS, t0);
        choice.record(1, 1000, 12 * MS, t0);
        assert_eq!(choice.pick(t0 + 999 * MS), 0);
        assert_eq!(choice.pick(t0 + 1000 * MS), 1);
        // Much cheaper this time; the first ran a second ago too, so it runs again, and then
        // the second is chosen until the first is due once more.
        let t1 = t0 + 1001 * MS;
        choice.record(1, 1000, 3 * MS, t1);
        assert_eq!(choice.pick(t1), 0);
        choice.record(0, 1000, 10 * MS, t1);
        assert_eq!(choice.pick(t1), 1);
        assert_eq!(choice.pick(t1 + 999 * MS), 1);
        assert_eq!(choice.pick(t1 + 1000 * MS), 0);
    }
}
