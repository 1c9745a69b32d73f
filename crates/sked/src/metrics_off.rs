//! The engine's metrics in a build without the `metrics` feature: the engine makes the same
//! calls, and nothing is recorded or linked (see `metrics.rs` for what the feature records).

use jiff::Timestamp;
use sked_core::Task;
use sked_store::{FinishOutcome, TaskEnded};

#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics;

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics
    }

    pub(crate) fn enqueued(&self, _queue: &str, _n: usize) {}

    pub(crate) fn claimed(&self, _tasks: &[Task], _now: Timestamp) {}

    pub(crate) fn finished(&self, _task: &TaskEnded, _outcome: &FinishOutcome, _now: Timestamp) {}

    pub(crate) fn rescued(&self, _n: usize) {}

    pub(crate) fn expired(&self, _n: usize) {}

    pub(crate) fn occurrence(&self, _outcome: &str) {}
}
