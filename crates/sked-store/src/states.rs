//! The groups of task states that SQL statements name, written once for both backends. The
//! text matters: SQLite uses a partial index only when a query repeats its predicate word for
//! word, so every statement spells a group the same way.

use sked_core::TaskState;

/// Tasks that have not finished: they hold their unique key.
pub const ACTIVE: &str = "('scheduled', 'available', 'running', 'retrying')";
/// Tasks that ended for good.
pub const FINISHED: &str = "('succeeded', 'dead', 'cancelled')";
/// Tasks waiting for their run time.
pub const WAITING: &str = "('scheduled', 'retrying')";
/// Tasks that have not started: they can be cancelled or moved without a worker.
pub const NOT_STARTED: &str = "('scheduled', 'available', 'retrying')";

/// An SQL list of states: `('a', 'b')`, in [`TaskState::ALL`]'s order.
pub fn sql_list(keep: impl Fn(TaskState) -> bool) -> String {
    let names: Vec<String> = TaskState::ALL
        .into_iter()
        .filter(|s| keep(*s))
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!("({})", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_are_what_their_names_say() {
        use TaskState::*;
        assert_eq!(ACTIVE, sql_list(|s| !s.is_finished()));
        assert_eq!(FINISHED, sql_list(|s| s.is_finished()));
        assert_eq!(WAITING, sql_list(|s| matches!(s, Scheduled | Retrying)));
        assert_eq!(
            NOT_STARTED,
            sql_list(|s| matches!(s, Scheduled | Available | Retrying))
        );
    }
}
