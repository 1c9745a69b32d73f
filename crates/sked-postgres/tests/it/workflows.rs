//! Workflows on PostgreSQL: a schema written when each task's membership was a row of its own
//! keeps its workflows through the migration that moves them into the workflow's row.

use jiff::{SignedDuration, Timestamp};
use sked_core::TaskState;
use sked_postgres::PgStore;
use sked_store::{BulkAction, BulkFilter, Store, TaskBulkParams, WorkflowTasksParams};

/// Workflow 1 made of tasks 1–3 (`a`, then `b` and `c` after it), with `a` succeeded, and task
/// 4 in no workflow: after the migration each task names its workflow and its name there,
/// the workflow counts and lists its tasks by name, and deleting its tasks deletes it.
#[tokio::test]
async fn a_workflow_keeps_its_tasks_and_names_through_the_migration() {
    let rows = "INSERT INTO sked_tasks (id, queue, kind, payload, priority, state, run_at, max_attempts, \
           created_at, finished_at, has_children) OVERRIDING SYSTEM VALUE VALUES \
           (1, 'default', 'k', 'null', 0, 'succeeded', now(), 1, now(), now(), true), \
           (2, 'default', 'k', 'null', 0, 'available', now(), 1, now(), NULL, false), \
           (3, 'default', 'k', 'null', 0, 'available', now(), 1, now(), NULL, false), \
           (4, 'default', 'k', 'null', 0, 'available', now(), 1, now(), NULL, false); \
         SELECT setval(pg_get_serial_sequence('sked_tasks', 'id'), 4); \
         INSERT INTO sked_workflows (name, created_at, size) VALUES ('etl', now(), 3); \
         INSERT INTO sked_workflow_tasks (task, workflow, name) \
           VALUES (3, 1, 'c'), (1, 1, 'a'), (2, 1, 'b');";
    let Some(schema) = crate::schema_before(37, rows).await else {
        return;
    };
    let store = PgStore::connect(schema.options()).await.unwrap();
    for (task, name) in [(1, "a"), (2, "b"), (3, "c")] {
        let w = store.task_get(task).await.unwrap().workflow.unwrap();
        assert_eq!((w.id, w.name.as_str()), (1, name));
    }
    assert_eq!(store.task_get(4).await.unwrap().workflow, None);
    let w = store.workflow_get(1).await.unwrap();
    assert_eq!((w.total, w.counts.values().sum::<u64>()), (3, 3));
    let nodes = store
        .workflow_tasks(WorkflowTasksParams {
            id: 1,
            after_id: None,
            limit: 10,
        })
        .await
        .unwrap();
    let names: Vec<(i64, &str)> = (nodes.items.iter())
        .map(|n| (n.id, n.name.as_str()))
        .collect();
    assert_eq!(names, vec![(1, "a"), (2, "b"), (3, "c")]);
    // Ended and deleted, its tasks take the workflow with them; the other task stays.
    let now = Timestamp::now() + SignedDuration::from_secs(1);
    for (action, states) in [
        (BulkAction::Cancel, vec![TaskState::Available]),
        (
            BulkAction::Delete,
            vec![TaskState::Succeeded, TaskState::Cancelled],
        ),
    ] {
        store
            .task_bulk(TaskBulkParams {
                filter: BulkFilter {
                    states,
                    workflow: Some(1),
                    ..Default::default()
                },
                action,
                after: None,
                limit: 100,
                now,
            })
            .await
            .unwrap();
    }
    assert!(store.workflow_get(1).await.is_err());
    assert!(store.task_get(4).await.is_ok());
}
