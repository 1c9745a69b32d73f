//! End-to-end tests of the `sked` binary that can share a process, linked as one binary (one
//! link instead of one per file): the CLI and HTTP on SQLite, `sked top` and import, `/metrics`,
//! `sked worker` as a process, the Python example worker, traces, and the tidy checks. The
//! client packages' tests (`tests/clients`: virtualenvs and npm projects installed from the
//! registries) run in a binary of their own, after these, so that their installs do not load
//! the machine while these measure read times. The PostgreSQL cluster,
//! restart, browser and half-open connection tests stay binaries of their own: they measure
//! failover times, drive Chromium or load the machine, and run after these, not beside them.

#[path = "../common/mod.rs"]
mod common;

mod batches;
mod bench_cli;
mod builtin_payloads;
mod bulk;
mod dedup;
mod dependencies;
mod e2e;
mod executors_cli;
mod expiry;
mod held_tasks;
mod help_and_errors;
mod hostile_cli;
mod hostile_lists;
mod key_order;
mod keys;
mod metrics;
mod module_cycles;
mod observe_cli;
mod otel;
mod pg_secrets;
mod python_worker;
mod queue_names;
mod rate_limits;
mod schedule_apply;
mod schedule_bounds;
mod schedule_policies;
mod scheduled_workflows;
mod shell;
mod succeeded_tasks;
mod tidy;
mod tokens;
mod worker_cli;
mod workflows;
