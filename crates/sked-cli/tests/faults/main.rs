//! Fault scenarios on real processes, each checked by the history checker ([`history`]):
//!
//! - [`kill_loop`]: servers and protocol workers killed with `kill -9` and paused with SIGSTOP
//!   in a loop, with servers' clocks an hour apart;
//! - [`failover`]: the PostgreSQL primary failed over under a running cluster, with
//!   pg_auto_failover ([`formation`]);
//! - [`partition`]: the leading node cut off from PostgreSQL by a fault proxy ([`proxy`]),
//!   its connections hanging rather than failing;
//! - [`workflow_kill`]: a workflow 1 → 100 → 1 run while nodes and workers are killed;
//! - [`deadline_race`]: 1,000 tasks whose deadlines to start race their claims on three nodes.
//!
//! They need `SKED_TEST_DATABASE_URL` or pg_auto_failover (skipped without them, except under
//! CI), and run one at a time: they load the machine and measure recovery times.
//!
//! The protocol workers are this test binary run again as child processes
//! ([`protocol_worker_process`], see [`load`]), so that they can be killed like any worker, and
//! record what they were told.

#[path = "../common/mod.rs"]
mod common;

mod deadline_race;
mod failover;
mod formation;
mod history;
mod kill_loop;
mod load;
mod partition;
mod proxy;
mod schedule_kill_loop;
mod workflow_kill;

use std::sync::{Mutex, MutexGuard};

/// A protocol worker, when this binary is run as one (see [`load`]).
#[test]
#[ignore = "a child process of the fault tests"]
fn protocol_worker_process() {
    load::worker_main();
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Held by each scenario for as long as it runs.
fn alone() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
