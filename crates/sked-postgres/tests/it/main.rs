//! The integration tests of the PostgreSQL backend, linked as one binary: the conformance
//! suite and transactional enqueue.

mod conformance;
mod known;
mod plans;
mod resume;
mod snapshot;
mod transactional;
