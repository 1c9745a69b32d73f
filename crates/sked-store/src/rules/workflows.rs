//! Inserting a workflow: its tasks in runs that go in together, each task with its parents'
//! ids, written once for every backend.

use std::ops::Range;

use sked_core::{NewWorkflow, TaskId};

use crate::{Result, StoreError, TaskInsert, WorkflowTaskInsert};

/// The order a workflow's tasks are inserted in: each after every task it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertOrder {
    /// The given tasks' indexes, in insert order.
    pub order: Vec<usize>,
    /// Each given task's place in that order.
    pub position: Vec<usize>,
    /// The places in insert order of the tasks each given task waits for, in the order its
    /// `after` names them.
    pub parents: Vec<Vec<usize>>,
}

impl InsertOrder {
    /// Checks `w` ([`NewWorkflow::layers`]) and orders its tasks layer by layer.
    pub fn of(w: &NewWorkflow) -> Result<InsertOrder> {
        let (layers, mut parents) = w
            .layers_and_parents()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let order: Vec<usize> = layers.into_iter().flatten().collect();
        let mut position = vec![0; order.len()];
        for (k, &i) in order.iter().enumerate() {
            position[i] = k;
        }
        for p in parents.iter_mut().flatten() {
            *p = position[*p];
        }
        Ok(InsertOrder {
            order,
            position,
            parents,
        })
    }

    /// The inserts of `w`'s tasks, given as `tasks` in insert order, each with its name and
    /// its parents in the workflow by place.
    pub fn inserts(
        mut self,
        w: &NewWorkflow,
        tasks: impl IntoIterator<Item = TaskInsert>,
    ) -> Vec<WorkflowTaskInsert> {
        (self.order.iter().zip(tasks))
            .map(|(&i, insert)| WorkflowTaskInsert {
                name: w.tasks[i].name.clone(),
                after: std::mem::take(&mut self.parents[i]),
                insert,
            })
            .collect()
    }
}

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

/// `insert`, waiting for the tasks at places `after` of a workflow too: `ids` are the ids of
/// the tasks inserted before it, in order.
pub fn with_parents(mut insert: TaskInsert, after: &[usize], ids: &[TaskId]) -> TaskInsert {
    insert.task.depends_on.extend(after.iter().map(|&a| ids[a]));
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
    fn a_workflow_goes_in_parents_first() {
        use sked_core::{NewTask, WorkflowTask};
        let w = NewWorkflow::new(vec![
            WorkflowTask::new("load", NewTask::new("l"), ["transform"]),
            WorkflowTask::new("transform", NewTask::new("t"), ["extract"]),
            WorkflowTask::new("extract", NewTask::new("e"), Vec::<String>::new()),
        ]);
        let order = InsertOrder::of(&w).unwrap();
        assert_eq!(order.order, vec![2, 1, 0]);
        assert_eq!(order.position, vec![2, 1, 0]);
        let tasks = order.order.iter().map(|&i| w.tasks[i].task.clone().into());
        let inserts = order.clone().inserts(&w, tasks);
        let named: Vec<(&str, &str, Vec<usize>)> = (inserts.iter())
            .map(|t| {
                (
                    t.name.as_str(),
                    t.insert.task.kind.as_str(),
                    t.after.clone(),
                )
            })
            .collect();
        assert_eq!(
            named,
            [
                ("extract", "e", vec![]),
                ("transform", "t", vec![0]),
                ("load", "l", vec![1])
            ]
        );
        assert_eq!(runs(&inserts).unwrap(), vec![0..1, 1..2, 2..3]);
    }

    #[test]
    fn an_insert_waits_for_its_parents_by_id() {
        let t = tasks(&[&[], &[], &[0, 1]]).remove(2);
        let insert = with_parents(t.insert, &t.after, &[10, 11]);
        assert_eq!(insert.task.depends_on, vec![10, 11]);
    }
}
