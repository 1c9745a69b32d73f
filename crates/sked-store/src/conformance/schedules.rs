//! Schedules: declaring them, pausing them, applying their plans exactly once.

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sked_core::{
    OccurrenceOutcome, OverlapPolicy, Plan, PlannedOccurrence, ScheduleDef, TaskState, TaskTemplate,
};

use crate::*;

use super::*;

pub(crate) fn def(name: &str, spec: &str) -> ScheduleDef {
    ScheduleDef::new(
        name,
        spec,
        TaskTemplate::new("k")
            .payload(json!({"n": 1}))
            .max_attempts(3),
    )
    .overlap(OverlapPolicy::Skip)
    .catchup(Default::default(), SignedDuration::from_hours(1))
}

fn declared(defs: &[ScheduleDef], now: Timestamp) -> ScheduleWriteParams {
    ScheduleWriteParams {
        group: Some("billing".into()),
        prune: true,
        dry_run: false,
        schedules: defs
            .iter()
            .map(|d| DeclaredSchedule {
                def: d.clone(),
                next_fire_at: Some(now.checked_add(SignedDuration::from_hours(1)).unwrap()),
            })
            .collect(),
        now,
    }
}

/// A page of schedules.
async fn list(
    store: &Shared,
    after: Option<&str>,
    limit: u32,
    with_payloads: bool,
) -> Page<Schedule> {
    store
        .schedule_list(ScheduleListParams {
            after: after.map(str::to_string),
            limit,
            with_payloads,
            filter: Default::default(),
        })
        .await
        .unwrap()
}

/// Every schedule, in one page.
async fn all(store: &Shared) -> Vec<Schedule> {
    let page = list(store, None, 1000, true).await;
    assert!(!page.more);
    page.items
}

pub async fn schedule_list_pages_by_name_and_bytes(store: &Shared) {
    let big = json!({"data": "x".repeat((1 << 20) - 100)});
    for i in 0..10 {
        let mut d = def(&format!("s{i}"), "0 3 * * *");
        d.task.as_mut().unwrap().payload = big.clone();
        store
            .schedule_upsert(ScheduleUpsertParams {
                def: d,
                next_fire_at: Some(at(3 * 3600)),
                now: at(0),
            })
            .await
            .unwrap();
    }
    // Without payloads: by name, in pages of the limit, payloads null.
    let first = list(store, None, 4, false).await;
    let names: Vec<&str> = first.items.iter().map(|s| s.name.as_str()).collect();
    assert_eq!((names, first.more), (vec!["s0", "s1", "s2", "s3"], true));
    assert!(
        first
            .items
            .iter()
            .all(|s| s.task.as_ref().unwrap().payload.is_null())
    );
    assert_eq!(first.next_after().as_deref(), Some("s3"));
    let rest = list(store, Some("s3"), 100, false).await;
    assert_eq!((rest.items.len(), rest.more), (6, false));
    assert_eq!(rest.items[0].name, "s4");
    // With payloads, a page stops at about LIST_BYTES_MAX (8 MiB: eight of 1 MiB).
    let full = list(store, None, 100, true).await;
    assert_eq!((full.items.len(), full.more), (8, true));
    assert_eq!(full.items[0].task.as_ref().unwrap().payload, big);
    let next = list(store, full.next_after().as_deref(), 100, true).await;
    assert_eq!((next.items.len(), next.more), (2, false));
}

pub async fn schedule_sync_creates_updates_and_removes(store: &Shared) {
    let names = |v: &[String]| v.join(",");
    // Made at run time: never touched by a group's sync.
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("adhoc", "0 5 * * *"),
            next_fire_at: Some(at(5 * 3600)),
            now: t0(),
        })
        .await
        .unwrap();
    let (a, b) = (def("a", "0 1 * * *"), def("b", "0 2 * * *"));
    let r = store
        .schedule_write_many(declared(&[a.clone(), b.clone()], t0()))
        .await
        .unwrap();
    assert_eq!((names(&r.created), r.updated.len()), ("a,b".into(), 0));
    let first = store.schedule_get("a").await.unwrap();
    assert_eq!(first.declared_by.as_deref(), Some("billing"));
    assert_eq!(first.next_fire_at, Some(at(3600)));
    // The same declarations again change nothing, not even the next fire time.
    let r = store
        .schedule_write_many(declared(&[a.clone(), b.clone()], at(60)))
        .await
        .unwrap();
    assert_eq!(names(&r.unchanged), "a,b");
    assert_eq!(store.schedule_get("a").await.unwrap(), first);
    // An operator pauses `a`; the next deploy changes its task, drops `b`, adds `c`.
    store
        .schedule_set_paused(SchedulePauseParams {
            reason: None,
            name: "a".into(),
            paused: true,
            next_fire_at: None,
            now: at(70),
        })
        .await
        .unwrap();
    let mut a2 = a.clone();
    a2.task.as_mut().unwrap().priority = 7;
    let r = store
        .schedule_write_many(declared(&[a2, def("c", "0 3 * * *")], at(80)))
        .await
        .unwrap();
    assert_eq!(
        (names(&r.created), names(&r.updated), names(&r.removed)),
        ("c".into(), "a".into(), "b".into())
    );
    let a = store.schedule_get("a").await.unwrap();
    assert!(a.paused, "a pause survives a redeploy");
    assert_eq!(a.task.as_ref().unwrap().priority, 7);
    assert_eq!(
        a.next_fire_at, first.next_fire_at,
        "same spec: same next fire"
    );
    assert_eq!(
        store.schedule_get("b").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let adhoc = store.schedule_get("adhoc").await.unwrap();
    assert_eq!(adhoc.declared_by, None);
    // A runtime update of a declared schedule keeps it declared.
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("c", "0 4 * * *"),
            next_fire_at: Some(at(4 * 3600)),
            now: at(90),
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .schedule_get("c")
            .await
            .unwrap()
            .declared_by
            .as_deref(),
        Some("billing")
    );
    // Declaring nothing removes what the group declared, and only that.
    let r = store
        .schedule_write_many(declared(&[], at(100)))
        .await
        .unwrap();
    assert_eq!(names(&r.removed), "a,c");
    let left: Vec<String> = all(store).await.into_iter().map(|s| s.name).collect();
    assert_eq!(left, vec!["adhoc".to_string()]);
}

pub async fn schedule_sync_concurrently_one_copy(store: &Shared) {
    let defs = vec![def("x", "*/5 * * * *"), def("y", "0 * * * *")];
    let runs = (0..20).map(|i| {
        let store = store.clone();
        let params = declared(&defs, at(i));
        tokio::spawn(async move { store.schedule_write_many(params).await })
    });
    let mut created = 0;
    for run in runs.collect::<Vec<_>>() {
        let report = run.await.unwrap().unwrap();
        created += report.created.len();
        assert!(report.removed.is_empty());
    }
    assert_eq!(created, 2, "each schedule is created by exactly one sync");
    assert_eq!(all(store).await.len(), 2);
}

pub async fn a_dry_run_reports_and_pruning_needs_a_group(store: &Shared) {
    let names = |v: &[String]| v.join(",");
    let write = |defs: &[ScheduleDef], group: Option<&str>, prune: bool, dry_run: bool| {
        let mut p = declared(defs, at(10));
        (p.group, p.prune, p.dry_run) = (group.map(str::to_string), prune, dry_run);
        store.schedule_write_many(p)
    };
    let (a, b) = (def("a", "0 1 * * *"), def("b", "0 2 * * *"));
    write(&[a.clone(), b.clone()], Some("files"), false, false)
        .await
        .unwrap();
    let before = all(store).await;
    // A dry run reports what would change, and changes nothing.
    let mut a2 = a.clone();
    a2.task.as_mut().unwrap().priority = 3;
    let r = write(
        &[a2.clone(), def("c", "0 3 * * *")],
        Some("files"),
        true,
        true,
    )
    .await
    .unwrap();
    assert_eq!(
        (names(&r.created), names(&r.updated), names(&r.removed)),
        ("c".into(), "a".into(), "b".into())
    );
    assert_eq!(all(store).await, before);
    // Without pruning, the group's other schedules stay.
    let r = write(&[a2.clone()], Some("files"), false, false)
        .await
        .unwrap();
    assert_eq!((names(&r.updated), r.removed.len()), ("a".into(), 0));
    assert!(store.schedule_get("b").await.is_ok());
    // Without a group: paused flag compared and written; group kept; pruning refused.
    let mut paused = a2.clone();
    paused.paused = true;
    let r = write(&[paused.clone()], None, false, false).await.unwrap();
    assert_eq!(names(&r.updated), "a");
    let s = store.schedule_get("a").await.unwrap();
    assert_eq!((s.paused, s.declared_by.as_deref()), (true, Some("files")));
    let r = write(&[paused], None, false, false).await.unwrap();
    assert_eq!(names(&r.unchanged), "a");
    let e = write(&[b], None, true, false).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
}

pub async fn schedule_crud_and_pause(store: &Shared) {
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("nightly", "0 3 * * *"),
            next_fire_at: Some(at(3 * 3600)),
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!(s.next_fire_at, Some(at(3 * 3600)));
    assert_eq!(s.task.as_ref().unwrap().payload, json!({"n": 1}));
    assert!(!s.running && s.last_outcome.is_none());
    // Same spec: the stored next fire time is kept; a new spec takes the given one.
    let mut d = def("nightly", "0 3 * * *");
    d.task.as_mut().unwrap().priority = 9;
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: d,
            next_fire_at: Some(at(1)),
            now: at(5),
        })
        .await
        .unwrap();
    assert_eq!(
        (s.next_fire_at, s.task.as_ref().unwrap().priority),
        (Some(at(3 * 3600)), 9)
    );
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("nightly", "0 4 * * *"),
            next_fire_at: Some(at(4 * 3600)),
            now: at(6),
        })
        .await
        .unwrap();
    assert_eq!(s.next_fire_at, Some(at(4 * 3600)));
    assert_eq!(
        store.schedule_next_fire_at().await.unwrap(),
        Some(at(4 * 3600))
    );
    let err = store
        .schedule_upsert(ScheduleUpsertParams {
            def: def("bad", "0 0 30 2 *"),
            next_fire_at: None,
            now: t0(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);

    let p = store
        .schedule_set_paused(SchedulePauseParams {
            reason: None,
            name: "nightly".into(),
            paused: true,
            next_fire_at: None,
            now: at(7),
        })
        .await
        .unwrap();
    assert!(p.paused);
    assert_eq!(store.schedule_next_fire_at().await.unwrap(), None);
    assert!(
        store
            .schedule_due(ScheduleDueParams {
                now: at(10 * 3600),
                limit: 10
            })
            .await
            .unwrap()
            .is_empty()
    );
    let r = store
        .schedule_set_paused(SchedulePauseParams {
            reason: None,
            name: "nightly".into(),
            paused: false,
            next_fire_at: Some(at(28 * 3600)),
            now: at(8),
        })
        .await
        .unwrap();
    assert_eq!((r.paused, r.next_fire_at), (false, Some(at(28 * 3600))));
    assert_eq!(all(store).await.len(), 1);
    assert!(store.schedule_delete("nightly", t0()).await.unwrap());
    assert!(!store.schedule_delete("nightly", t0()).await.unwrap());
    assert_eq!(
        store.schedule_get("nightly").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

pub(crate) fn occ(nominal_at: Timestamp, outcome: OccurrenceOutcome) -> PlannedOccurrence {
    PlannedOccurrence::new(nominal_at, outcome, None)
}

pub async fn schedule_apply_is_exactly_once(store: &Shared) {
    let d = def("tick", "* * * * *");
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: d.clone(),
            next_fire_at: Some(at(60)),
            now: t0(),
        })
        .await
        .unwrap();
    let due = store
        .schedule_due(ScheduleDueParams {
            now: at(60),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 1);
    assert!(due[0].active_tasks.is_empty());
    let plan = Plan {
        occurrences: vec![occ(at(60), OccurrenceOutcome::Enqueued)],
        next_fire_at: Some(at(120)),
        ..Plan::default()
    };
    let apply = |expected| {
        store.schedule_apply(ScheduleApplyParams {
            name: "tick".into(),
            expected_next_fire_at: expected,
            plan: plan.clone(),
            template: sked_core::RunTemplate::Task(d.task.clone().unwrap()),
            now: at(60),
        })
    };
    let ids: Vec<TaskId> = (apply(Some(at(60))).await.unwrap().into_iter())
        .map(|r| r.first)
        .collect();
    assert_eq!(ids.len(), 1);
    let t = store.task_get(ids[0]).await.unwrap();
    assert_eq!(
        (t.schedule.as_deref(), t.nominal_at),
        (Some("tick"), Some(at(60)))
    );
    // A second node with the same stale view is refused, whatever it expected.
    assert_eq!(
        apply(Some(at(60))).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    // Even a plan that passes the compare-and-set cannot record the same occurrence twice.
    assert_eq!(
        apply(Some(at(120))).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let tasks = store
        .task_list(TaskListParams {
            schedule: Some("tick".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    assert_eq!(tasks.len(), 1);
    let s = store.schedule_get("tick").await.unwrap();
    assert_eq!(s.next_fire_at, Some(at(120)));
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "tick".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].task_id, Some(ids[0]));
    assert_eq!(ledger[0].task_state, Some(TaskState::Available));
    // Status derived from the schedule's tasks.
    let c = claim(store, 1, at(61)).await.remove(0);
    let s = store.schedule_get("tick").await.unwrap();
    assert!(s.running);
    assert_eq!(s.last_started_at, Some(at(61)));
    finish(store, c.id, c.attempt, failed(false), at(62))
        .await
        .unwrap();
    let s = store.schedule_get("tick").await.unwrap();
    assert!(!s.running);
    assert_eq!(
        (s.last_finished_at, s.last_outcome),
        (Some(at(62)), Some(TaskState::Dead))
    );
}

pub async fn schedule_buffer_release_and_replace(store: &Shared) {
    let d = def("b", "* * * * *");
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: d.clone(),
            next_fire_at: Some(at(60)),
            now: t0(),
        })
        .await
        .unwrap();
    let apply = |expected, plan: Plan, now| {
        store.schedule_apply(ScheduleApplyParams {
            name: "b".into(),
            expected_next_fire_at: expected,
            plan,
            template: sked_core::RunTemplate::Task(d.task.clone().unwrap()),
            now,
        })
    };
    let first = apply(
        Some(at(60)),
        Plan {
            occurrences: vec![occ(at(60), OccurrenceOutcome::Enqueued)],
            next_fire_at: Some(at(120)),
            ..Plan::default()
        },
        at(60),
    )
    .await
    .unwrap()[0]
        .first;
    // The next occurrence is buffered while the first is pending.
    apply(
        Some(at(120)),
        Plan {
            occurrences: vec![occ(at(120), OccurrenceOutcome::Buffered)],
            buffered: Some(at(120)),
            next_fire_at: Some(at(180)),
            ..Plan::default()
        },
        at(120),
    )
    .await
    .unwrap();
    let due = store
        .schedule_due(ScheduleDueParams {
            now: at(121),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(due.len(), 1, "a buffered schedule is due");
    assert_eq!(due[0].active_tasks, vec![first]);
    assert_eq!(due[0].schedule.buffered_at, Some(at(120)));
    // Released: the buffered line becomes enqueued, with a task.
    let released = apply(
        Some(at(180)),
        Plan {
            occurrences: vec![occ(at(120), OccurrenceOutcome::Enqueued)],
            buffered: None,
            next_fire_at: Some(at(180)),
            cancel: vec![first],
            runs: 1,
        },
        at(130),
    )
    .await
    .unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(
        store.task_get(first).await.unwrap().state,
        TaskState::Cancelled,
        "replaced"
    );
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "b".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].outcome, OccurrenceOutcome::Enqueued);
    assert_eq!(ledger[0].task_id, Some(released[0].first));
    assert_eq!(store.schedule_get("b").await.unwrap().buffered_at, None);
}
