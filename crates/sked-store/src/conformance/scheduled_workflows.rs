//! Schedules that start a workflow: a run is every task of it, made together, counted as one
//! by the overlap policy, withdrawn whole, triggered and backfilled whole.

use jiff::Timestamp;
use sked_core::{
    NewTask, NewWorkflow, OccurrenceOutcome, OverlapPolicy, Plan, PlannedOccurrence, ScheduleDef,
    TaskState, WorkflowTask,
};

use super::ahead::{nominal_second, pass, schedule_tasks};
use super::*;
use crate::*;

/// extract → transform → load.
fn etl() -> NewWorkflow {
    NewWorkflow::new(vec![
        WorkflowTask::new("extract", NewTask::new("extract"), Vec::<String>::new()),
        WorkflowTask::new("transform", NewTask::new("transform"), ["extract"]),
        WorkflowTask::new("load", NewTask::new("load"), ["transform"]),
    ])
    .name("etl")
}

/// Makes schedule `name` starting [`etl`] every 10 s, first due at 10 s.
async fn put(store: &Shared, name: &str, overlap: OverlapPolicy) -> ScheduleDef {
    let def = ScheduleDef::for_workflow(name, "every 10s", etl()).overlap(overlap);
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: def.clone(),
            next_fire_at: Some(at(10)),
            now: t0(),
        })
        .await
        .unwrap();
    def
}

/// The schedule's tasks as (nominal second, kind, state), oldest first.
async fn tasks(store: &Shared, name: &str) -> Vec<(i64, String, TaskState)> {
    (schedule_tasks(store, name).await.into_iter())
        .map(|t| (nominal_second(&t), t.kind, t.state))
        .collect()
}

fn run(nominal: i64, states: [TaskState; 3]) -> Vec<(i64, String, TaskState)> {
    (["extract", "transform", "load"].iter().zip(states))
        .map(|(k, s)| (nominal, k.to_string(), s))
        .collect()
}

async fn workflows(store: &Shared) -> Vec<WorkflowInfo> {
    store
        .workflow_list(WorkflowListParams {
            before_id: None,
            limit: 100,
        })
        .await
        .unwrap()
        .items
}

/// Claims the first task due, of kind `kind`, and ends it succeeded.
async fn succeed(store: &Shared, kind: &str, now: Timestamp) {
    let c = claim(store, 1, now).await;
    assert_eq!(c.len(), 1, "a task claimable");
    assert_eq!(c[0].kind, kind);
    finish(
        store,
        c[0].id,
        c[0].attempt,
        FinishOutcome::Succeeded { result: None },
        now,
    )
    .await
    .unwrap();
}

pub async fn a_scheduled_workflow_runs_whole_and_counts_as_one_run(store: &Shared) {
    use TaskState::{Available, Scheduled, Succeeded, Waiting};
    let def = put(store, "etl", OverlapPolicy::AllowUpTo(2)).await;
    assert_eq!(
        store.schedule_get("etl").await.unwrap().workflow,
        def.workflow,
        "stored and read back"
    );
    let r = store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    // The run made ahead: all three tasks, the first due at the occurrence, the others waiting.
    assert_eq!(r.enqueued.len(), 3);
    assert_eq!(
        tasks(store, "etl").await,
        run(10, [Scheduled, Waiting, Waiting])
    );
    let w = workflows(store).await;
    assert_eq!(w.len(), 1);
    assert_eq!(
        (
            w[0].name.as_deref(),
            w[0].schedule.as_deref(),
            w[0].nominal_at
        ),
        (Some("etl"), Some("etl"), Some(at(10)))
    );
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "etl".into(),
            limit: 10,
        })
        .await
        .unwrap();
    let first = store.task_get(ledger[0].task_id.unwrap()).await.unwrap();
    assert_eq!(
        first.kind, "extract",
        "the ledger names the run's first task"
    );
    // The steps run in order.
    assert!(claim(store, 10, at(9)).await.is_empty());
    succeed(store, "extract", at(10)).await;
    assert_eq!(
        tasks(store, "etl").await,
        run(10, [Succeeded, Available, Waiting])
    );
    // At 15 s the 10 s run has two unfinished tasks: one run of the two allow:2 lets run,
    // so the 20 s run is made ahead.
    let r = store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 3);
    let mut expect = run(10, [Succeeded, Available, Waiting]);
    expect.extend(run(20, [Scheduled, Waiting, Waiting]));
    assert_eq!(tasks(store, "etl").await, expect);
    // Two runs unfinished at 30 s: the third is skipped, saying which tasks it waited for.
    let r = store
        .schedule_materialise(pass(at(30), 30, &[]))
        .await
        .unwrap();
    assert!(r.enqueued.is_empty());
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "etl".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger[0].nominal_at, at(30));
    assert_eq!(ledger[0].outcome, OccurrenceOutcome::Skipped);
    let detail = ledger[0].detail.as_deref().unwrap();
    assert!(detail.contains("2 runs were unfinished"), "{detail}");
    succeed(store, "transform", at(31)).await;
    succeed(store, "load", at(32)).await;
    assert_eq!(workflows(store).await[1].state, WorkflowState::Succeeded);
}

pub async fn a_workflow_run_made_ahead_is_withdrawn_whole(store: &Shared) {
    let def = put(store, "w", OverlapPolicy::Skip).await;
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    assert_eq!(tasks(store, "w").await.len(), 3);
    // A change at 6 s withdraws the run for 10 s: its tasks, its edges and its workflow.
    let mut changed = def.clone();
    changed.workflow.as_mut().unwrap().tasks[2].task.payload = serde_json::json!({"v": 2});
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: changed,
            next_fire_at: Some(at(10)),
            now: at(6),
        })
        .await
        .unwrap();
    assert!(tasks(store, "w").await.is_empty());
    assert!(workflows(store).await.is_empty());
    // Made again from the new definition.
    let r = store
        .schedule_materialise(pass(at(6), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 3);
    let load = store.task_get(r.enqueued[2].1).await.unwrap();
    assert_eq!(
        (load.kind.as_str(), load.payload),
        ("load", serde_json::json!({"v": 2}))
    );
    // A delete withdraws it too.
    assert!(store.schedule_delete("w", at(7)).await.unwrap());
    assert!(tasks(store, "w").await.is_empty());
    assert!(workflows(store).await.is_empty());
}

pub async fn a_workflow_schedule_is_triggered_and_backfilled_whole(store: &Shared) {
    let def = put(store, "t", OverlapPolicy::Allow).await;
    let runs = store
        .schedule_apply(ScheduleApplyParams {
            name: "t".into(),
            expected_next_fire_at: Some(at(10)),
            plan: Plan {
                occurrences: vec![PlannedOccurrence::new(
                    at(2),
                    OccurrenceOutcome::Enqueued,
                    Some("triggered by hand".into()),
                )],
                next_fire_at: Some(at(10)),
                ..Plan::default()
            },
            template: ScheduleDef::template(&def).unwrap(),
            now: at(2),
        })
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].tasks.len(), 3);
    assert_eq!(store.task_get(runs[0].first).await.unwrap().kind, "extract");
    // Past occurrences, at 10 s and 20 s, backfilled at 25 s: a workflow each.
    store
        .schedule_set_paused(SchedulePauseParams {
            name: "t".into(),
            paused: false,
            reason: None,
            next_fire_at: Some(at(30)),
            now: at(25),
        })
        .await
        .unwrap();
    let report = store
        .schedule_backfill(ScheduleBackfillParams {
            name: "t".into(),
            nominals: vec![at(10), at(20)],
            now: at(25),
        })
        .await
        .unwrap();
    assert_eq!(report.enqueued.len(), 2);
    let w = workflows(store).await;
    assert_eq!(w.len(), 3);
    let nominals: Vec<Option<Timestamp>> = w.iter().map(|w| w.nominal_at).collect();
    assert_eq!(nominals, [Some(at(20)), Some(at(10)), Some(at(2))]);
    assert_eq!(tasks(store, "t").await.len(), 9);
}

/// Claims the first task due, of kind `kind`, and fails it for good.
async fn kill(store: &Shared, kind: &str, now: Timestamp) {
    let c = claim(store, 1, now).await;
    assert_eq!(c[0].kind, kind);
    finish(store, c[0].id, c[0].attempt, failed(false), now)
        .await
        .unwrap();
}

async fn failing(store: &Shared) -> Vec<String> {
    let page = store
        .schedule_list(ScheduleListParams {
            after: None,
            limit: 100,
            with_payloads: false,
            filter: ScheduleFilter {
                failing: true,
                ..ScheduleFilter::default()
            },
        })
        .await
        .unwrap();
    page.items.into_iter().map(|s| s.name).collect()
}

pub async fn a_workflow_run_with_a_dead_task_is_a_dead_run(store: &Shared) {
    let def = ScheduleDef::for_workflow("f", "every 10s", etl())
        .overlap(OverlapPolicy::Allow)
        .pause_after_failures(2);
    store
        .schedule_upsert(ScheduleUpsertParams {
            def,
            next_fire_at: Some(at(10)),
            now: t0(),
        })
        .await
        .unwrap();
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    succeed(store, "extract", at(10)).await;
    // Transform dies; load, waiting for it, is cancelled after it: the run died.
    kill(store, "transform", at(11)).await;
    assert_eq!(
        tasks(store, "f").await,
        run(
            10,
            [TaskState::Succeeded, TaskState::Dead, TaskState::Cancelled]
        )
    );
    let s = store.schedule_get("f").await.unwrap();
    assert_eq!(
        (s.last_outcome, s.last_finished_at),
        (Some(TaskState::Dead), Some(at(11)))
    );
    assert_eq!(failing(store).await, ["f"]);
    // The next run's first step succeeds: its run has not ended, the last outcome stays.
    let r = store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert!(r.paused.is_empty(), "one dead run of two");
    succeed(store, "extract", at(20)).await;
    let s = store.schedule_get("f").await.unwrap();
    assert_eq!(s.last_outcome, Some(TaskState::Dead));
    // Its transform dies too: two dead runs in a row pause the schedule.
    kill(store, "transform", at(21)).await;
    let r = store
        .schedule_materialise(pass(at(25), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.paused, [("f".to_string(), 2)]);
    assert!(store.schedule_get("f").await.unwrap().paused);
}
