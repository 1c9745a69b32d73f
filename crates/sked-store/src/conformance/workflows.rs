//! Workflows: made whole or not at all, run in their order, counted, listed, cancelled and
//! pruned with their tasks.

use std::collections::BTreeMap;

use sked_core::{TaskId, TaskState, WorkflowId};

use super::*;

/// A workflow of `(name, kind, after)` in the order given, which must be an order to insert in.
fn workflow(tasks: &[(&str, NewTask, &[usize])], now: Timestamp) -> WorkflowCreateParams {
    WorkflowCreateParams {
        name: Some("nightly".into()),
        tasks: tasks
            .iter()
            .map(|(name, t, after)| WorkflowTaskInsert {
                name: name.to_string(),
                after: after.to_vec(),
                insert: t.clone().into(),
            })
            .collect(),
        schedule: None,
        nominal_at: None,
        now,
    }
}

fn counts(pairs: &[(TaskState, u64)]) -> BTreeMap<TaskState, u64> {
    pairs.iter().copied().collect()
}

async fn succeed_claimed(store: &Shared, now: Timestamp) -> Vec<TaskId> {
    let claimed = claim(store, 100, now).await;
    for t in &claimed {
        let done = finish(
            store,
            t.id,
            t.attempt,
            FinishOutcome::Succeeded { result: None },
            now,
        )
        .await
        .unwrap();
        assert_eq!(done.state, TaskState::Succeeded);
    }
    let mut ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    ids
}

async fn info(store: &Shared, id: WorkflowId) -> WorkflowInfo {
    store.workflow_get(id).await.unwrap()
}

pub async fn a_workflow_is_made_whole_and_runs_in_its_order(store: &Shared) {
    let outside = insert(store, task("before"), t0()).await.id;
    let made = store
        .workflow_create(workflow(
            &[
                ("extract", task("extract"), &[]),
                ("t1", task("transform"), &[0]),
                ("t2", task("transform").after([outside]), &[0]),
                ("load", task("load").queue("other"), &[1, 2]),
            ],
            t0(),
        ))
        .await
        .unwrap();
    let [extract, t1, t2, load] = made.tasks[..] else {
        panic!("four tasks: {made:?}");
    };
    let w = info(store, made.id).await;
    assert_eq!(w.name.as_deref(), Some("nightly"));
    assert_eq!(w.total, 4);
    assert_eq!(w.created_at, t0());
    assert_eq!(
        w.counts,
        counts(&[(TaskState::Available, 1), (TaskState::Waiting, 3)])
    );
    assert_eq!(
        (w.state, w.done, w.finished_at),
        (WorkflowState::Active, false, None)
    );

    // Each task knows its workflow and parents, in and out of it.
    let got = store.task_get(t2).await.unwrap();
    assert_eq!(
        got.workflow.as_ref().map(|w| (w.id, w.name.as_str())),
        Some((made.id, "t2"))
    );
    assert_eq!(
        got.depends_on,
        vec![extract.min(outside), extract.max(outside)]
    );
    assert_eq!(store.task_get(outside).await.unwrap().workflow, None);
    let nodes = store
        .workflow_tasks(WorkflowTasksParams {
            id: made.id,
            after_id: None,
            limit: 3,
        })
        .await
        .unwrap();
    assert!(nodes.more);
    let seen: Vec<(&str, &str, TaskState, Vec<String>)> = (nodes.items.iter())
        .map(|n| (n.name.as_str(), n.kind.as_str(), n.state, n.after.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("extract", "extract", TaskState::Available, vec![]),
            (
                "t1",
                "transform",
                TaskState::Waiting,
                vec!["extract".to_string()]
            ),
            (
                "t2",
                "transform",
                TaskState::Waiting,
                vec!["extract".to_string()]
            ),
        ]
    );
    let rest = store
        .workflow_tasks(WorkflowTasksParams {
            id: made.id,
            after_id: Some(t2),
            limit: 3,
        })
        .await
        .unwrap();
    assert!(!rest.more);
    assert_eq!(rest.items.len(), 1);
    assert_eq!(
        (rest.items[0].id, &rest.items[0].after),
        (load, &vec!["t1".to_string(), "t2".to_string()])
    );
    let listed = store
        .task_list(TaskListParams {
            workflow: Some(made.id),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<TaskId> = listed.items.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        vec![extract, t1, t2, load],
        "a list filters by workflow"
    );

    // Run in order: the outside parent and extract, then the transforms, then load.
    assert_eq!(succeed_claimed(store, at(1)).await, vec![outside, extract]);
    assert_eq!(succeed_claimed(store, at(2)).await, vec![t1, t2]);
    assert_eq!(info(store, made.id).await.counts[&TaskState::Available], 1);
    assert_eq!(succeed_claimed(store, at(3)).await, vec![load]);
    let w = info(store, made.id).await;
    assert_eq!(w.counts, counts(&[(TaskState::Succeeded, 4)]));
    assert_eq!(
        (w.state, w.done, w.finished_at),
        (WorkflowState::Succeeded, true, Some(at(3)))
    );

    // Newest first, a page at a time.
    let second = store
        .workflow_create(workflow(&[("only", task("k"), &[])], at(4)))
        .await
        .unwrap()
        .id;
    let page = store
        .workflow_list(WorkflowListParams {
            before_id: None,
            limit: 1,
        })
        .await
        .unwrap();
    assert!(page.more);
    assert_eq!(page.items[0].id, second);
    assert_eq!(page.items[0].counts, counts(&[(TaskState::Available, 1)]));
    let page = store
        .workflow_list(WorkflowListParams {
            before_id: Some(second),
            limit: 1,
        })
        .await
        .unwrap();
    assert!(!page.more);
    assert_eq!(
        (page.items[0].id, page.items[0].state),
        (made.id, WorkflowState::Succeeded)
    );
}

pub async fn a_workflow_with_a_missing_parent_makes_nothing(store: &Shared) {
    let bad = workflow(
        &[
            ("a", task("k"), &[]),
            ("b", task("k").after([424_242]), &[0]),
        ],
        t0(),
    );
    let e = store.workflow_create(bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("424242"), "{e}");
    let page = store
        .workflow_list(WorkflowListParams {
            before_id: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert!(page.items.is_empty(), "no workflow: {page:?}");
    let tasks = store
        .task_list(TaskListParams {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(tasks.items.is_empty(), "no task: {tasks:?}");
    assert_eq!(
        store.workflow_get(1).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

pub async fn a_workflow_fails_is_cancelled_and_goes_with_its_tasks(store: &Shared) {
    // A dead task fails its workflow, and cancels what waits for it.
    let failing = store
        .workflow_create(workflow(
            &[
                ("a", task("k").max_attempts(1), &[]),
                ("b", task("k"), &[0]),
            ],
            t0(),
        ))
        .await
        .unwrap();
    let claimed = claim(store, 10, at(1)).await;
    assert_eq!(claimed.len(), 1);
    finish(store, claimed[0].id, 1, failed(true), at(1))
        .await
        .unwrap();
    let w = info(store, failing.id).await;
    assert_eq!(
        w.counts,
        counts(&[(TaskState::Dead, 1), (TaskState::Cancelled, 1)])
    );
    assert_eq!((w.state, w.done), (WorkflowState::Failed, true));

    // Cancelled as a whole by a bulk cancel of its tasks; the other workflow is left.
    let other = store
        .workflow_create(workflow(&[("x", task("k").run_at(at(100)), &[])], at(2)))
        .await
        .unwrap();
    let cancelled = store
        .workflow_create(workflow(
            &[
                ("a", task("k").run_at(at(100)), &[]),
                ("b", task("k"), &[0]),
            ],
            at(2),
        ))
        .await
        .unwrap();
    let batch = store
        .task_bulk(TaskBulkParams {
            action: BulkAction::Cancel,
            filter: BulkFilter {
                states: BulkAction::Cancel.applies_to().to_vec(),
                workflow: Some(cancelled.id),
                ..Default::default()
            },
            after: None,
            limit: 100,
            now: at(3),
        })
        .await
        .unwrap();
    assert_eq!(batch.changed, 2);
    let w = info(store, cancelled.id).await;
    assert_eq!(w.counts, counts(&[(TaskState::Cancelled, 2)]));
    assert_eq!(
        (w.state, w.done, w.finished_at),
        (WorkflowState::Cancelled, true, Some(at(3)))
    );
    assert_eq!(info(store, other.id).await.state, WorkflowState::Active);

    // Retention takes the tasks, and the workflows left without any.
    let pruned = store
        .task_prune(TaskPruneParams {
            finished_before: at(10),
            now: at(10),
            limit: 1000,
            finished_since: None,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 4);
    for gone in [failing.id, cancelled.id] {
        assert_eq!(
            store.workflow_get(gone).await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        let tasks = store
            .workflow_tasks(WorkflowTasksParams {
                id: gone,
                after_id: None,
                limit: 10,
            })
            .await;
        assert_eq!(tasks.unwrap_err().kind(), ErrorKind::NotFound);
    }
    assert_eq!(info(store, other.id).await.total, 1);

    // A bulk delete by workflow takes its ended tasks, and then the workflow.
    store
        .task_bulk(TaskBulkParams {
            action: BulkAction::Cancel,
            filter: BulkFilter {
                states: BulkAction::Cancel.applies_to().to_vec(),
                workflow: Some(other.id),
                ..Default::default()
            },
            after: None,
            limit: 100,
            now: at(20),
        })
        .await
        .unwrap();
    let deleted = store
        .task_bulk(TaskBulkParams {
            action: BulkAction::Delete,
            filter: BulkFilter {
                states: BulkAction::Delete.applies_to().to_vec(),
                workflow: Some(other.id),
                ..Default::default()
            },
            after: None,
            limit: 100,
            now: at(21),
        })
        .await
        .unwrap();
    assert_eq!(deleted.changed, 1);
    assert_eq!(
        store.workflow_get(other.id).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}
