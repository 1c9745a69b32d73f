//! What a store keeps between claims so that an idle node's claim is one statement: when the
//! earliest waiting (scheduled or retrying) task is due, and the queue settings. Each claim
//! otherwise runs staging and reads the settings before claiming, which took about a fifth of
//! an idle node's enqueue-to-start time.
//!
//! Both are kept by the same means as claim positions ([`super::positions`]): announcements and
//! the store's own changes bring the due time forward, and an announcement without a run time
//! (a queue changed), a rescue or a listener that reconnects makes both unknown. A claim still
//! stages, and reads the settings, at least once a second.

use jiff::{SignedDuration, Timestamp};

/// How long a claim relies on what it knows before looking again.
pub(crate) const REFRESH: SignedDuration = SignedDuration::from_secs(1);

/// When the earliest waiting task is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum NextDue {
    /// Not known: stage.
    #[default]
    Unknown,
    /// No task is waiting (as of `checked`).
    Never { checked: Timestamp },
    /// The earliest is due at `at` (as of `checked`).
    At { at: Timestamp, checked: Timestamp },
}

impl NextDue {
    /// A task may be due at `run_at`.
    pub(crate) fn lower(&mut self, run_at: Timestamp) {
        *self = match *self {
            NextDue::Unknown => NextDue::Unknown,
            NextDue::Never { checked } => NextDue::At {
                at: run_at,
                checked,
            },
            NextDue::At { at, checked } => NextDue::At {
                at: at.min(run_at),
                checked,
            },
        };
    }

    /// Whether a waiting task is known to be due at `now` (or nothing is known): staging will
    /// make tasks available, rather than look once a second for what no announcement named.
    pub(crate) fn known_due(&self, now: Timestamp) -> bool {
        match *self {
            NextDue::Unknown => true,
            NextDue::Never { .. } => false,
            NextDue::At { at, .. } => at <= now,
        }
    }

    /// Whether a claim at `now` stages first.
    pub(crate) fn stage(&self, now: Timestamp) -> bool {
        let (due, checked) = match *self {
            NextDue::Unknown => return true,
            NextDue::Never { checked } => (None, checked),
            NextDue::At { at, checked } => (Some(at), checked),
        };
        due.is_some_and(|at| at <= now)
            || checked.saturating_add(REFRESH).unwrap_or(Timestamp::MAX) <= now
    }
}

/// How claims take a limited queue's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limited {
    /// Limited by a rate alone: within starts reserved beforehand (see `super::rated`).
    Reserve,
    /// Under the queue row's lock (see `super::limited`).
    Lock,
}

/// A queue's settings as claims use them: its name, paused, and how it is limited (`None`:
/// it is not).
pub(crate) type QueueSetting = (String, bool, Option<Limited>);

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    #[test]
    fn claims_stage_when_a_task_may_be_due_or_a_second_has_passed() {
        assert!(NextDue::Unknown.stage(at(0)));
        let mut next = NextDue::Never { checked: at(0) };
        assert!(!next.stage(at(999)));
        assert!(next.stage(at(1000)), "a second after the last look");
        next.lower(at(500));
        assert!(!next.stage(at(499)));
        assert!(next.stage(at(500)), "a task announced due at 500 ms");
        next.lower(at(700));
        assert_eq!(
            next,
            NextDue::At {
                at: at(500),
                checked: at(0)
            },
            "never later"
        );
        let mut unknown = NextDue::Unknown;
        unknown.lower(at(5));
        assert_eq!(unknown, NextDue::Unknown);
    }
}
