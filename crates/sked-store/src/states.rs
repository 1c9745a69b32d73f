//! The groups of task states that SQL statements name, written once for both backends. The
//! text matters: SQLite uses a partial index only when a query repeats its predicate word for
//! word, so every statement spells a group the same way.

use sked_core::TaskState;

/// Tasks that have not finished: they hold their unique key.
pub const ACTIVE: &str = "('waiting', 'scheduled', 'available', 'running', 'retrying')";
/// Tasks that ended for good.
pub const FINISHED: &str = "('succeeded', 'dead', 'cancelled', 'expired')";
/// Tasks waiting for their run time (not for their parents: that is `waiting`).
pub const TIMED: &str = "('scheduled', 'retrying')";
/// Tasks that have not started: they can be cancelled or moved without a worker.
pub const NOT_STARTED: &str = "('waiting', 'scheduled', 'available', 'retrying')";
/// Tasks that failed: ended dead, or waiting to retry.
pub const FAILING: &str = "('dead', 'retrying')";
/// Tasks queued and not yet run (with attempt 0): a debounced enqueue may still replace them.
pub const QUEUED: &str = "('scheduled', 'available')";
/// The tasks of a schedule's run made ahead that has not begun: due at the occurrence, or
/// waiting for a task of the run (a workflow's).
pub const MADE_AHEAD: &str = "('waiting', 'scheduled')";

/// Tasks that expire when their deadline passes before they start (with attempt 0).
pub const EXPIRABLE: &str = "('waiting', 'scheduled', 'available')";

/// Tasks that, once started (`attempt > 0`), hold their key in a queue with strict order per
/// key until they end well: waiting to retry (or due again), or dead until retried or deleted.
/// Running ones hold their key by the per-key limit of 1 that strict order needs, and are
/// left out; so are tasks that never started, so that work that does not fail never enters
/// the index that finds these.
pub const KEY_HOLDING: &str = "('scheduled', 'available', 'retrying', 'dead')";
/// [`KEY_HOLDING`] as a disjunction, for SQLite's partial index (see [`any_of`]).
pub const KEY_HOLDING_ANY: &str =
    "(state = 'scheduled' OR state = 'available' OR state = 'retrying' OR state = 'dead')";

/// [`ACTIVE`] as a disjunction, for SQLite's partial indexes (see [`any_of`]).
pub const ACTIVE_ANY: &str = "(state = 'waiting' OR state = 'scheduled' OR state = 'available' \
     OR state = 'running' OR state = 'retrying')";
/// [`MADE_AHEAD`] as a disjunction, for SQLite (see [`any_of`]).
pub const MADE_AHEAD_ANY: &str = "(state = 'waiting' OR state = 'scheduled')";
/// [`EXPIRABLE`] as a disjunction, for SQLite's partial index (see [`any_of`]).
pub const EXPIRABLE_ANY: &str = "(state = 'waiting' OR state = 'scheduled' OR state = 'available')";
/// [`FINISHED`] as a disjunction, for SQLite's partial indexes (see [`any_of`]).
pub const FINISHED_ANY: &str =
    "(state = 'succeeded' OR state = 'dead' OR state = 'cancelled' OR state = 'expired')";

/// A group of states as a disjunction: `(state = 'a' OR state = 'b')`, in [`TaskState::ALL`]'s
/// order. SQLite evaluates an `IN` list of three or more constants by building a temporary
/// b-tree, once for each execution of a statement; in a partial index's predicate that happens
/// for every statement that writes a task, and cost more than the write. A disjunction is a few
/// comparisons. Its partial indexes spell the larger groups this way, and its statements repeat
/// the spelling, since SQLite matches a partial index's predicate term by term.
pub fn any_of(keep: impl Fn(TaskState) -> bool) -> String {
    let terms: Vec<String> = TaskState::ALL
        .into_iter()
        .filter(|s| keep(*s))
        .map(|s| format!("state = '{}'", s.as_str()))
        .collect();
    format!("({})", terms.join(" OR "))
}

/// How a backend's partial indexes spell the groups of three or more states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// `state IN ('a', 'b', 'c')`: PostgreSQL.
    InList,
    /// `(state = 'a' OR state = 'b' OR state = 'c')`: SQLite (see [`any_of`]).
    AnyOf,
}

impl Spelling {
    /// The condition "the task has finished", as this spelling's indexes write it.
    pub fn finished(self) -> String {
        match self {
            Spelling::InList => format!("state IN {FINISHED}"),
            Spelling::AnyOf => FINISHED_ANY.to_string(),
        }
    }

    /// The condition "the task has not finished", as this spelling's indexes write it.
    pub fn active(self) -> String {
        match self {
            Spelling::InList => format!("state IN {ACTIVE}"),
            Spelling::AnyOf => ACTIVE_ANY.to_string(),
        }
    }
}

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
        assert_eq!(TIMED, sql_list(|s| matches!(s, Scheduled | Retrying)));
        assert_eq!(
            NOT_STARTED,
            sql_list(|s| matches!(s, Waiting | Scheduled | Available | Retrying))
        );
        assert_eq!(QUEUED, sql_list(|s| matches!(s, Scheduled | Available)));
        assert_eq!(MADE_AHEAD, sql_list(|s| matches!(s, Waiting | Scheduled)));
        assert_eq!(MADE_AHEAD_ANY, any_of(|s| matches!(s, Waiting | Scheduled)));
        assert_eq!(ACTIVE_ANY, any_of(|s| !s.is_finished()));
        assert_eq!(FINISHED_ANY, any_of(|s| s.is_finished()));
        let expirable = |s: TaskState| sked_core::Transition::Expire.check(s).is_ok();
        assert_eq!(EXPIRABLE, sql_list(expirable));
        assert_eq!(EXPIRABLE_ANY, any_of(expirable));
        let holding = |s: TaskState| matches!(s, Scheduled | Available | Retrying | Dead);
        assert_eq!(KEY_HOLDING, sql_list(holding));
        assert_eq!(KEY_HOLDING_ANY, any_of(holding));
    }
}
