//! Commands that talk to a server: tasks, schedules, queues. They go through the typed
//! [`sked::Client`]; tables are drawn from its values, and `--json` prints the same values
//! serialized, as the API sends them.
//!
//! One file per command group (`task`, `workflow`, `batch`, `schedule`, `queue`); here what
//! they share.

mod apply;
mod batch;
mod bulk;
mod calendar;
mod queue;
mod schedule;
mod task;
mod workflow;

pub(crate) use batch::{BatchCmd, batch};
pub(crate) use calendar::{CalendarCmd, calendar};
pub(crate) use queue::{QueueCmd, queue};
pub(crate) use schedule::{ScheduleCmd, schedule};
pub(crate) use task::{TaskCmd, task};
pub(crate) use workflow::{WorkflowCmd, workflow};

use serde::Serialize;
use sked::Client;

use crate::{CliError, CliResult, Remote};

/// The typed client for the server `remote` names.
pub(crate) fn connect(remote: &Remote) -> CliResult<Client> {
    Client::remote_with(sked::client::RemoteOptions {
        token: remote.token.clone(),
        ..sked::client::RemoteOptions::new(&remote.url)
    })
    .map_err(CliError::usage)
}

/// An error from sked as an exit code: bad input or nothing there is 2, the rest 1. When no
/// server answered, what to do about it follows.
pub(crate) fn failed(e: sked::Error) -> CliError {
    use sked::store::ErrorKind;
    match e.kind() {
        ErrorKind::Invalid | ErrorKind::NotFound => CliError::usage(e),
        _ if e.to_string().starts_with(sked::client::UNREACHABLE) => CliError::runtime(format!(
            "{e}\nhint: start one with `sked server`, or name the one to use with --server URL \
             or SKED_URL"
        )),
        _ => CliError::runtime(e),
    }
}

/// Prints `value` as JSON when asked, else runs `human` on it.
pub(crate) fn show<T: Serialize>(remote: &Remote, value: &T, human: impl FnOnce(&T)) {
    if remote.json {
        out!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        human(value);
    }
}

pub(super) fn parse_payload(p: Option<&str>) -> CliResult<serde_json::Value> {
    match p {
        None => Ok(serde_json::Value::Null),
        Some(s) => serde_json::from_str(s)
            .map_err(|e| CliError::usage(format!("invalid --payload JSON: {e}"))),
    }
}

pub(super) fn task_id(id: &str) -> CliResult<i64> {
    id.parse()
        .map_err(|_| CliError::usage(format!("invalid task id {id:?}: task ids are integers")))
}

pub(super) fn flag_duration(flag: &str, v: &str) -> CliResult<jiff::SignedDuration> {
    sked_core::parse_duration(v).map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))
}

/// Task states, as `--state` accepts them.
pub(super) const STATES: [&str; 9] = [
    "waiting",
    "scheduled",
    "available",
    "running",
    "retrying",
    "succeeded",
    "dead",
    "cancelled",
    "expired",
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_states_flags_take_are_every_state() {
        let all = sked_core::TaskState::ALL.map(|s| s.as_str());
        assert_eq!(super::STATES, all);
    }
}
