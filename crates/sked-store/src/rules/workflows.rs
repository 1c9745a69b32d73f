//! Inserting a workflow: its tasks in runs that go in together, each task with its parents'
//! ids, written once for every backend.

use std::ops::Range;

use sked_core::TaskId;

use crate::{Result, StoreError, TaskInsert, WorkflowTaskInsert};

/// Checks the tasks of a workflow to insert and splits them into runs that each go in with
/// one insert: no task of a run waits for another of it, so every parent of a run's tasks is
/// in an earlier run (or outside the workflow).
pub fn runs(tasks: &[WorkflowTaskInsert]) -> Result<Vec<Range<usize>>> {
    let mut runs = Vec::new();
    let mut start = 0;
    for (i, t) in tasks.iter().enumerate() {
        if t.insert.task.unique_key.is_some() {
            return Err(StoreError::Invalid(format!(
                "task {:?}: a workflow's task cannot have a unique key",
                t.name
            )));
        }
        if t.after.iter().any(|&a| a >= i) {
            return Err(StoreError::Invalid(format!(
                "task {:?} comes before a task it waits for",
                t.name
            )));
        }
        if t.after.iter().any(|&a| a >= start) {
            runs.push(start..i);
            start = i;
        }
    }
    if start < tasks.len() {
        runs.push(start..tasks.len());
    }
    Ok(runs)
}

/// The insert of `t`, waiting for its parents in the workflow too: `ids` are the ids of the
/// tasks inserted before it, in order.
pub fn insert(t: &WorkflowTaskInsert, ids: &[TaskId]) -> TaskInsert {
    let mut insert = t.insert.clone();
    insert
        .task
        .depends_on
        .extend(t.after.iter().map(|&a| ids[a]));
    insert
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(after: &[&[usize]]) -> Vec<WorkflowTaskInsert> {
        (after.iter().enumerate())
            .map(|(i, a)| WorkflowTaskInsert {
                name: format!("t{i}"),
                after: a.to_vec(),
                insert: sked_core::NewTask::new("k").into(),
            })
            .collect()
    }

    #[test]
    fn a_run_ends_before_a_task_that_waits_for_one_of_it() {
        let fan = tasks(&[&[], &[0], &[0], &[0], &[1, 2, 3]]);
        assert_eq!(runs(&fan).unwrap(), vec![0..1, 1..4, 4..5]);
        let roots = tasks(&[&[], &[], &[]]);
        assert_eq!(runs(&roots).unwrap(), vec![0..3]);
        assert!(
            runs(&tasks(&[&[1], &[]])).is_err(),
            "a parent after its child"
        );
    }

    #[test]
    fn an_insert_waits_for_its_parents_by_id() {
        let t = &tasks(&[&[], &[], &[0, 1]])[2];
        assert_eq!(insert(t, &[10, 11]).task.depends_on, vec![10, 11]);
    }
}
