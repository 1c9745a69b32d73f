//! The integration tests of the HTTP API, linked as one binary: requests against the router,
//! and the Rust worker embedded and remote.

mod api;
mod bulk_schedules;
mod hostile;
mod openapi;
mod support;
mod worker_sdk;
mod workflows;
