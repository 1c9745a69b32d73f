//! The integration tests of the sked library, linked as one binary (one link instead of one
//! per file): the engine on SQLite with a manual clock, the worker, the built-in executors, and
//! two nodes on PostgreSQL.

mod engine;
mod executors;
mod postgres;
mod schedule_policies;
mod traces;
mod worker;
