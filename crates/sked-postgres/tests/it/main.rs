//! The integration tests of the PostgreSQL backend, linked as one binary: the conformance
//! suite, transactional enqueue and abandoned transactions.

mod abandoned;
mod conformance;
mod known;
mod plans;
mod reserved;
mod resume;
mod room;
mod snapshot;
mod transactional;
