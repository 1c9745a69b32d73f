//! What a batch's end enqueues, written once for every backend.

use std::collections::BTreeMap;

use sked_core::{BatchId, NewTask, TaskState};

use crate::TaskInsert;

/// The callbacks a batch enqueues when it ends with these counts: `on_complete` always,
/// `on_success` when every task succeeded (an empty batch included). Each payload gains the
/// batch's id and counts ([`sked_core::callback_payload`]).
pub fn callbacks(
    id: BatchId,
    on_success: Option<&NewTask>,
    on_complete: Option<&NewTask>,
    counts: &BTreeMap<TaskState, u64>,
) -> (Option<TaskInsert>, Option<TaskInsert>) {
    let all_succeeded = counts
        .iter()
        .all(|(s, n)| *n == 0 || *s == TaskState::Succeeded);
    let make = |t: &NewTask| {
        let mut task = t.clone();
        task.payload = sked_core::callback_payload(&t.kind, &t.payload, id, counts);
        TaskInsert::from(task)
    };
    (
        on_success.filter(|_| all_succeeded).map(make),
        on_complete.map(make),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_success_only_when_every_task_succeeded() {
        let (s, c) = (NewTask::new("s"), NewTask::new("c"));
        let ok = BTreeMap::from([(TaskState::Succeeded, 3)]);
        let (made_s, made_c) = callbacks(7, Some(&s), Some(&c), &ok);
        assert_eq!(
            made_s.unwrap().task.payload["batch"]["counts"]["succeeded"],
            3
        );
        assert_eq!(made_c.unwrap().task.payload["batch"]["id"], 7);
        let one_dead = BTreeMap::from([(TaskState::Succeeded, 2), (TaskState::Dead, 1)]);
        let (made_s, made_c) = callbacks(7, Some(&s), Some(&c), &one_dead);
        assert!(made_s.is_none() && made_c.is_some());
        let (made_s, _) = callbacks(7, Some(&s), None, &BTreeMap::new());
        assert!(made_s.is_some(), "an empty batch succeeded");
    }
}
