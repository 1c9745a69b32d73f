//! How long a queue keeps its ended tasks, by the state they ended in: a queue's own retention
//! for a state, or the server's (`--retention`) where it has none. Both backends store it in
//! one column per state and read it the same way.

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};
use sked_core::TaskState;

/// A queue's retention by ended state; a state without one keeps the server's retention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueRetention {
    #[serde(
        default,
        with = "sked_core::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub succeeded: Option<SignedDuration>,
    #[serde(
        default,
        with = "sked_core::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub dead: Option<SignedDuration>,
    #[serde(
        default,
        with = "sked_core::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub cancelled: Option<SignedDuration>,
    #[serde(
        default,
        with = "sked_core::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<sked_core::openapi::Duration>))]
    pub expired: Option<SignedDuration>,
}

impl QueueRetention {
    /// Whether every state keeps the server's retention.
    pub fn is_default(&self) -> bool {
        *self == QueueRetention::default()
    }

    /// The retention of tasks ended in `state` (`None`: the server's, or not an ended state).
    pub fn of(&self, state: TaskState) -> Option<SignedDuration> {
        match state {
            TaskState::Succeeded => self.succeeded,
            TaskState::Dead => self.dead,
            TaskState::Cancelled => self.cancelled,
            TaskState::Expired => self.expired,
            _ => None,
        }
    }

    /// Sets the retention of `state`, an ended state (`None`: the server's).
    pub fn set(&mut self, state: TaskState, keep: Option<SignedDuration>) {
        match state {
            TaskState::Succeeded => self.succeeded = keep,
            TaskState::Dead => self.dead = keep,
            TaskState::Cancelled => self.cancelled = keep,
            TaskState::Expired => self.expired = keep,
            _ => {}
        }
    }

    /// Checks a retention for `state`: an ended state, kept a positive time that fits.
    pub fn check(state: TaskState, keep: Option<SignedDuration>) -> crate::Result<()> {
        if !state.is_finished() {
            return Err(crate::StoreError::Invalid(format!(
                "a retention is for ended tasks (succeeded, dead, cancelled, expired), not {state}"
            )));
        }
        if let Some(d) = keep {
            if d <= SignedDuration::ZERO {
                return Err(crate::StoreError::Invalid(format!(
                    "the retention of {state} tasks must be positive"
                )));
            }
            sked_core::check_duration("retention", d)
                .map_err(|e| crate::StoreError::Invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// The retentions as the columns hold them, in [`COLUMNS`] order (milliseconds).
    pub fn to_columns(&self) -> [Option<i64>; 4] {
        let ms =
            |d: Option<SignedDuration>| d.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        [
            ms(self.succeeded),
            ms(self.dead),
            ms(self.cancelled),
            ms(self.expired),
        ]
    }

    /// The retentions the columns hold, in [`COLUMNS`] order.
    pub fn from_columns(ms: [Option<i64>; 4]) -> QueueRetention {
        let d = |ms: Option<i64>| ms.map(SignedDuration::from_millis);
        QueueRetention {
            succeeded: d(ms[0]),
            dead: d(ms[1]),
            cancelled: d(ms[2]),
            expired: d(ms[3]),
        }
    }
}

/// The queue settings' columns, one per ended state, in this order.
pub const COLUMNS: [&str; 4] = [
    "retention_succeeded_ms",
    "retention_dead_ms",
    "retention_cancelled_ms",
    "retention_expired_ms",
];

/// The column of `state`'s retention.
pub fn column(state: TaskState) -> Option<&'static str> {
    let at = match state {
        TaskState::Succeeded => 0,
        TaskState::Dead => 1,
        TaskState::Cancelled => 2,
        TaskState::Expired => 3,
        _ => return None,
    };
    Some(COLUMNS[at])
}

/// The columns `changes` write, each with its value in milliseconds, checked first
/// ([`QueueRetention::check`]): nothing is written when one is refused.
pub fn column_changes(
    changes: &[(TaskState, Option<SignedDuration>)],
) -> crate::Result<Vec<(&'static str, Option<i64>)>> {
    let mut out = Vec::with_capacity(changes.len());
    for &(state, keep) in changes {
        QueueRetention::check(state, keep)?;
        let ms = keep.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        out.push((column(state).unwrap_or_default(), ms));
    }
    Ok(out)
}

/// SQL: the retention in milliseconds of queue row `q`'s tasks ended in `state` (an SQL
/// expression naming a state), null where the queue keeps the server's.
pub fn ms_sql(q: &str, state: &str) -> String {
    let arms: Vec<String> = TaskState::ALL
        .into_iter()
        .filter_map(|s| Some(format!("WHEN '{}' THEN {q}.{}", s.as_str(), column(s)?)))
        .collect();
    format!("CASE {state} {} END", arms.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ended_state_has_a_column_and_reads_back() {
        let mut r = QueueRetention::default();
        for (i, s) in TaskState::ALL
            .into_iter()
            .filter(|s| s.is_finished())
            .enumerate()
        {
            assert_eq!(column(s), Some(COLUMNS[i]));
            r.set(s, Some(SignedDuration::from_secs(i as i64 + 1)));
        }
        assert_eq!(QueueRetention::from_columns(r.to_columns()), r);
        assert_eq!(r.of(TaskState::Dead), Some(SignedDuration::from_secs(2)));
        assert!(QueueRetention::check(TaskState::Running, None).is_err());
        assert!(QueueRetention::check(TaskState::Dead, Some(SignedDuration::ZERO)).is_err());
        assert_eq!(
            ms_sql("q", "s.state"),
            "CASE s.state WHEN 'succeeded' THEN q.retention_succeeded_ms \
             WHEN 'dead' THEN q.retention_dead_ms WHEN 'cancelled' THEN q.retention_cancelled_ms \
             WHEN 'expired' THEN q.retention_expired_ms END"
        );
    }
}
