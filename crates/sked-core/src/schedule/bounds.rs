//! A schedule's bounds: the first time it may fire and the last. Its most runs are counted by
//! the planner ([`super::plan::PlanInput::runs_left`]).

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use super::Spec;

/// When a schedule may fire: from `start_at` to `end_at`, both included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bounds {
    /// No occurrence before this; an interval counts from it.
    pub start_at: Option<Timestamp>,
    /// No occurrence after this.
    pub end_at: Option<Timestamp>,
}

impl Bounds {
    /// The first occurrence of `spec` after `after` within the bounds: none before `start_at`,
    /// none after `end_at`. An interval counts from `start_at` when there is one, else from
    /// `anchor`.
    pub fn next_after(
        &self,
        spec: &Spec,
        after: Timestamp,
        tz: &TimeZone,
        anchor: Timestamp,
    ) -> Option<Timestamp> {
        let after = match self.start_at {
            Some(s) if s > after => s.checked_sub(SignedDuration::from_nanos(1)).unwrap_or(s),
            _ => after,
        };
        let anchor = self.start_at.unwrap_or(anchor);
        spec.next_after(after, tz, anchor)
            .filter(|t| !self.ended_by(*t))
    }

    /// `t` if it is within the bounds; the first occurrence from `start_at` if `t` is before
    /// it (see [`Bounds::next_after`]); `None` if `t` is after `end_at`.
    pub fn first_from(
        &self,
        t: Timestamp,
        spec: &Spec,
        tz: &TimeZone,
        anchor: Timestamp,
    ) -> Option<Timestamp> {
        match self.start_at {
            Some(s) if t < s => self.next_after(spec, t, tz, anchor),
            _ => Some(t).filter(|t| !self.ended_by(*t)),
        }
    }

    /// Whether `t` is after the end.
    pub fn ended_by(&self, t: Timestamp) -> bool {
        self.end_at.is_some_and(|end| t > end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn occurrences_fall_within_the_bounds_both_included() {
        let hourly = Spec::parse("0 * * * *").unwrap();
        let utc = TimeZone::UTC;
        let anchor = t("2026-01-01T00:00:00Z");
        let b = Bounds {
            start_at: Some(t("2026-03-01T10:00:00Z")),
            end_at: Some(t("2026-03-01T12:00:00Z")),
        };
        let mut seen = Vec::new();
        let mut after = t("2026-02-01T00:00:00Z");
        while let Some(n) = b.next_after(&hourly, after, &utc, anchor) {
            seen.push(n.to_string());
            after = n;
        }
        assert_eq!(
            seen,
            [
                "2026-03-01T10:00:00Z",
                "2026-03-01T11:00:00Z",
                "2026-03-01T12:00:00Z"
            ]
        );
        assert_eq!(
            b.first_from(t("2026-02-01T00:00:00Z"), &hourly, &utc, anchor),
            Some(t("2026-03-01T10:00:00Z"))
        );
        assert_eq!(
            b.first_from(t("2026-03-01T11:00:00Z"), &hourly, &utc, anchor),
            Some(t("2026-03-01T11:00:00Z"))
        );
        assert_eq!(
            b.first_from(t("2026-03-01T13:00:00Z"), &hourly, &utc, anchor),
            None
        );
        assert!(b.ended_by(t("2026-03-01T12:00:01Z")));
        assert!(!b.ended_by(t("2026-03-01T12:00:00Z")));
    }

    #[test]
    fn an_interval_counts_from_its_start() {
        let every = Spec::parse("every 90m").unwrap();
        let b = Bounds {
            start_at: Some(t("2026-03-01T10:07:00Z")),
            end_at: None,
        };
        let anchor = t("2026-01-01T00:00:00Z");
        let first = b.next_after(&every, anchor, &TimeZone::UTC, anchor);
        assert_eq!(first, Some(t("2026-03-01T10:07:00Z")));
        let second = b.next_after(&every, first.unwrap(), &TimeZone::UTC, anchor);
        assert_eq!(second, Some(t("2026-03-01T11:37:00Z")));
        // Unbounded, as before.
        let none = Bounds::default();
        assert_eq!(
            none.next_after(&every, anchor, &TimeZone::UTC, anchor),
            Some(t("2026-01-01T01:30:00Z"))
        );
    }
}
