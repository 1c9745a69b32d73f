//! Schedules planned ahead: runs made before their time, decisions that wait for a run to
//! end, passes sharing the schedules, and edits withdrawing runs made ahead.

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sked_core::{OccurrenceOutcome, OverlapPolicy, TaskState};

use super::schedules::def;
use super::*;
use crate::*;

/// A pass at `now` looking `ahead` seconds on.
pub(crate) fn pass(now: Timestamp, ahead: i64, runs_ended: &[&str]) -> ScheduleMaterialiseParams {
    ScheduleMaterialiseParams {
        now,
        horizon: SignedDuration::from_secs(ahead),
        limit: 1000,
        max_enqueued: 100_000,
        misfire_grace: SignedDuration::from_secs(10),
        catchup_limit: 1000,
        runs_ended: runs_ended.iter().map(|s| s.to_string()).collect(),
    }
}

/// Makes `def`, first due at 10 s.
async fn put(store: &Shared, def: sked_core::ScheduleDef) {
    store
        .schedule_upsert(ScheduleUpsertParams {
            def,
            next_fire_at: Some(at(10)),
            now: t0(),
        })
        .await
        .unwrap();
}

/// The schedule's tasks, oldest first.
pub(crate) async fn schedule_tasks(store: &Shared, name: &str) -> Vec<sked_core::Task> {
    let mut tasks = store
        .task_list(TaskListParams {
            schedule: Some(name.into()),
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .items;
    tasks.sort_by_key(|t| t.id);
    tasks
}

/// The second after [`t0`] a task of a schedule runs for.
pub(crate) fn nominal_second(t: &sked_core::Task) -> i64 {
    t.nominal_at.unwrap().duration_since(t0()).as_secs()
}

/// The schedule's tasks as (nominal second, state), oldest first.
async fn runs(store: &Shared, name: &str) -> Vec<(i64, TaskState)> {
    (schedule_tasks(store, name).await.iter())
        .map(|t| (nominal_second(t), t.state))
        .collect()
}

pub async fn runs_within_the_horizon_are_made_ahead_once(store: &Shared) {
    put(store, def("a", "every 10s").overlap(OverlapPolicy::Allow)).await;
    let report = store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    assert_eq!((report.planned, report.enqueued.len()), (1, 1));
    assert!(!report.more);
    assert_eq!(runs(store, "a").await, [(10, TaskState::Scheduled)]);
    let t = store.task_get(report.enqueued[0].1).await.unwrap();
    assert_eq!(t.run_at, at(10), "due at its nominal time");
    // One run at a time is made ahead: 20 s is planned once 10 s is due, half-way to 20 s.
    let again = store
        .schedule_materialise(pass(at(6), 30, &[]))
        .await
        .unwrap();
    assert_eq!((again.planned, again.enqueued.len()), (0, 0));
    assert_eq!(store.schedule_next_look_at().await.unwrap(), Some(at(15)));
    // The schedule's next fire time is its run made ahead.
    let s = store.schedule_get("a").await.unwrap();
    assert_eq!(
        (s.next_fire_at, s.unplanned_from),
        (Some(at(10)), Some(at(20)))
    );
    // Not claimable before its time, then claimable at it.
    assert!(claim(store, 10, at(9)).await.is_empty());
    let c = claim(store, 10, at(10)).await;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].nominal_at, Some(at(10)));
    let r = store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 1);
    assert_eq!(
        runs(store, "a").await,
        [(10, TaskState::Running), (20, TaskState::Scheduled)]
    );
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "a".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 2);
    assert!(
        ledger
            .iter()
            .all(|o| o.outcome == OccurrenceOutcome::Enqueued)
    );
}

pub async fn a_decision_that_needs_its_time_waits_for_the_run_or_the_time(store: &Shared) {
    put(store, def("s", "every 10s")).await;
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    let c = claim(store, 1, at(10)).await.remove(0);
    // Skip, its 10 s run unfinished at 15 s: 20 s depends on whether that run ends in time.
    let r = store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert_eq!((r.planned, r.enqueued.len()), (1, 0));
    assert_eq!(store.schedule_next_look_at().await.unwrap(), Some(at(20)));
    finish(
        store,
        c.id,
        c.attempt,
        FinishOutcome::Succeeded { result: None },
        at(16),
    )
    .await
    .unwrap();
    // Told of nothing, a pass leaves it to its time.
    let r = store
        .schedule_materialise(pass(at(17), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.planned, 0);
    // Told the run ended: 20 s is made ahead at once.
    let r = store
        .schedule_materialise(pass(at(17), 30, &["s", "nosuch"]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 1);
    assert_eq!(
        runs(store, "s").await,
        [(10, TaskState::Succeeded), (20, TaskState::Scheduled)]
    );
    assert_eq!(store.schedule_next_look_at().await.unwrap(), Some(at(25)));
    // At 30 s the 20 s run is still unfinished: 30 s is skipped, decided at its time.
    let r = store
        .schedule_materialise(pass(at(25), 30, &[]))
        .await
        .unwrap();
    assert!(r.enqueued.is_empty());
    let r = store
        .schedule_materialise(pass(at(30), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.outcomes, [OccurrenceOutcome::Skipped]);
    assert!(r.enqueued.is_empty());
}

pub async fn edits_pauses_and_deletes_withdraw_runs_made_ahead(store: &Shared) {
    put(store, def("e", "every 10s").overlap(OverlapPolicy::Allow)).await;
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert_eq!(
        runs(store, "e").await,
        [(10, TaskState::Scheduled), (20, TaskState::Scheduled)]
    );
    // At 16 s, 10 s has come (its run is due) and 20 s has not: the change withdraws 20 s.
    let mut changed = def("e", "every 10s").overlap(OverlapPolicy::Allow);
    changed.task = changed.task.map(|t| t.payload(json!({"n": 2})));
    let s = store
        .schedule_upsert(ScheduleUpsertParams {
            def: changed,
            next_fire_at: Some(at(20)),
            now: at(16),
        })
        .await
        .unwrap();
    assert_eq!(runs(store, "e").await, [(10, TaskState::Scheduled)]);
    assert_eq!(
        s.unplanned_from,
        Some(at(20)),
        "planned again from the withdrawn one"
    );
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "e".into(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(ledger.len(), 1);
    // Made again with the new template.
    let r = store
        .schedule_materialise(pass(at(16), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 1);
    let t = store.task_get(r.enqueued[0].1).await.unwrap();
    assert_eq!((t.nominal_at, t.payload), (Some(at(20)), json!({"n": 2})));
    // A pause withdraws it too; a resume fires from then on.
    let pause = |paused: bool, now: Timestamp| SchedulePauseParams {
        name: "e".into(),
        paused,
        reason: None,
        next_fire_at: Some(at(20)).filter(|_| !paused),
        now,
    };
    store
        .schedule_set_paused(pause(true, at(17)))
        .await
        .unwrap();
    assert_eq!(runs(store, "e").await, [(10, TaskState::Scheduled)]);
    let r = store
        .schedule_materialise(pass(at(18), 30, &[]))
        .await
        .unwrap();
    assert!(r.enqueued.is_empty());
    store
        .schedule_set_paused(pause(false, at(18)))
        .await
        .unwrap();
    let r = store
        .schedule_materialise(pass(at(18), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 1);
    // A delete withdraws the run to come; the run whose time has come stays.
    assert!(store.schedule_delete("e", at(19)).await.unwrap());
    assert_eq!(runs(store, "e").await, [(10, TaskState::Scheduled)]);
}

pub async fn passes_at_once_make_each_occurrence_once(store: &Shared) {
    for i in 0..40 {
        put(
            store,
            def(&format!("p{i:02}"), "every 10s").overlap(OverlapPolicy::Allow),
        )
        .await;
    }
    let mut passes = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        passes.push(tokio::spawn(async move {
            let mut p = pass(at(5), 30, &[]);
            p.limit = 7;
            let mut made = 0;
            loop {
                let r = store.schedule_materialise(p.clone()).await.unwrap();
                made += r.enqueued.len();
                if !r.more {
                    return made;
                }
            }
        }));
    }
    let mut made = 0;
    for p in passes {
        made += p.await.unwrap();
    }
    assert_eq!(made, 40);
    for i in 0..40 {
        let r = runs(store, &format!("p{i:02}")).await;
        assert_eq!(r, [(10, TaskState::Scheduled)], "p{i:02}");
    }
}

pub async fn many_schedules_are_written_at_once_or_not_at_all(store: &Shared) {
    let many = |names: &[&str], spec: &str| ScheduleWriteParams {
        group: None,
        prune: false,
        dry_run: false,
        schedules: names
            .iter()
            .map(|n| DeclaredSchedule {
                def: def(n, spec),
                next_fire_at: Some(at(10)),
            })
            .collect(),
        now: t0(),
    };
    let names: Vec<String> = (0..12_000).map(|i| format!("m{i:05}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let r = store
        .schedule_write_many(many(&refs, "every 10s"))
        .await
        .unwrap();
    assert_eq!((r.created.len(), r.updated.len()), (12_000, 0));
    let s = store.schedule_get("m11999").await.unwrap();
    assert_eq!(
        (s.spec.as_str(), s.next_fire_at),
        ("every 10s", Some(at(10)))
    );
    // Planned like any other: each first looked at at once (10 s is within the hour).
    let mut p = pass(at(5), 30, &[]);
    p.limit = 20_000;
    let made = store.schedule_materialise(p).await.unwrap();
    assert_eq!(made.enqueued.len(), 12_000);
    // Replacing two and adding one; the replaced ones' runs made ahead are withdrawn.
    let r = store
        .schedule_write_many(ScheduleWriteParams {
            now: at(6),
            ..many(&["m00000", "m00001", "n"], "every 20s")
        })
        .await
        .unwrap();
    assert_eq!(
        (r.created, r.updated),
        (
            vec!["n".to_string()],
            vec!["m00000".to_string(), "m00001".to_string()]
        )
    );
    assert!(runs(store, "m00000").await.is_empty());
    assert_eq!(runs(store, "m00002").await, [(10, TaskState::Scheduled)]);
    // One bad definition, or a name twice, changes nothing and is named.
    let mut bad = many(&["x", "y"], "every 10s");
    bad.schedules[1].def.spec = "61 * * * *".into();
    let e = store.schedule_write_many(bad).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("\"y\""), "{e}");
    let e = store
        .schedule_write_many(many(&["x", "x"], "every 10s"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("given twice"), "{e}");
    assert_eq!(
        store.schedule_get("x").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}

pub async fn a_run_waiting_to_retry_stops_when_the_next_occurrence_is_planned(store: &Shared) {
    put(store, def("f", "every 10s")).await;
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    let c = claim(store, 1, at(10)).await.remove(0);
    let t = finish(store, c.id, c.attempt, failed(true), at(11))
        .await
        .unwrap();
    assert_eq!(t.state, TaskState::Retrying);
    // Shown as unfinished and failing.
    let s = store.schedule_get("f").await.unwrap();
    let retrying = RetryingRun {
        task_id: c.id,
        attempt: 1,
        max_attempts: 3,
    };
    assert_eq!((s.running, s.retrying), (false, Some(retrying)));
    // At 15 s the next occurrence is planned: the run stops retrying and 20 s is made ahead.
    let r = store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    assert_eq!(r.enqueued.len(), 1);
    let t = store.task_get(c.id).await.unwrap();
    assert_eq!((t.state, t.finished_at), (TaskState::Dead, Some(at(15))));
    assert_eq!(t.last_error.as_deref(), Some("boom"), "its error is kept");
    assert_eq!(t.attempts.len(), 1, "one attempt: {:?}", t.attempts);
    let s = store.schedule_get("f").await.unwrap();
    assert_eq!((s.retrying, s.last_outcome), (None, Some(TaskState::Dead)));
    let ledger = store
        .occurrence_list(OccurrenceListParams {
            schedule: "f".into(),
            limit: 10,
        })
        .await
        .unwrap();
    let detail = ledger[0].detail.as_deref().unwrap_or_default();
    assert!(detail.contains(&format!("task {}", c.id)), "{detail}");
    assert!(detail.contains("stopped retrying"), "{detail}");
    // A run that is running (a retry attempt, say) is not touched: 30 s waits for it.
    let c = claim(store, 1, at(20)).await.remove(0);
    let r = store
        .schedule_materialise(pass(at(25), 30, &[]))
        .await
        .unwrap();
    assert!(r.enqueued.is_empty());
    assert_eq!(
        store.task_get(c.id).await.unwrap().state,
        TaskState::Running
    );
    // A schedule that keeps retrying leaves its run be; stored and read back.
    put(store, def("k", "every 10s").keep_retrying()).await;
    assert!(store.schedule_get("k").await.unwrap().keep_retrying);
    store
        .schedule_materialise(pass(at(35), 30, &[]))
        .await
        .unwrap();
    let k = store
        .task_list(TaskListParams {
            schedule: Some("k".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .remove(0);
    let claimed = claim(store, 100, at(40)).await;
    let c = claimed.iter().find(|t| t.id == k.id).unwrap();
    finish(store, c.id, c.attempt, failed(true), at(41))
        .await
        .unwrap();
    store
        .schedule_materialise(pass(at(45), 30, &[]))
        .await
        .unwrap();
    assert_eq!(
        store.task_get(k.id).await.unwrap().state,
        TaskState::Retrying
    );
}

pub async fn schedules_are_listed_and_counted_by_prefix_paused_and_failing(store: &Shared) {
    for name in ["t-1-a", "t-1-b", "t-10", "t-2-a", "u-fails", "t."] {
        put(store, def(name, "every 10s")).await;
    }
    store
        .schedule_set_paused(SchedulePauseParams {
            name: "t-1-b".into(),
            paused: true,
            reason: None,
            next_fire_at: None,
            now: at(1),
        })
        .await
        .unwrap();
    // u-fails' run fails and waits to retry: failing.
    let only_u = ScheduleMaterialiseParams {
        limit: 10,
        ..pass(at(5), 30, &[])
    };
    store.schedule_materialise(only_u).await.unwrap();
    let runs_of_u = store
        .task_list(TaskListParams {
            schedule: Some("u-fails".into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let u = runs_of_u.items[0].id;
    let c = claim(store, 100, at(10)).await;
    for t in &c {
        let outcome = match t.id == u {
            true => failed(true),
            false => FinishOutcome::Succeeded { result: None },
        };
        finish(store, t.id, t.attempt, outcome, at(11))
            .await
            .unwrap();
    }
    let names = |filter: ScheduleFilter, after: Option<&str>, limit: u32| {
        let params = ScheduleListParams {
            after: after.map(str::to_string),
            limit,
            with_payloads: false,
            filter,
        };
        async move {
            let page = store.schedule_list(params).await.unwrap();
            page.items.into_iter().map(|s| s.name).collect::<Vec<_>>()
        }
    };
    let prefix = |p: &str| ScheduleFilter {
        prefix: Some(p.into()),
        ..Default::default()
    };
    assert_eq!(
        names(prefix("t-1"), None, 10).await,
        ["t-1-a", "t-1-b", "t-10"]
    );
    assert_eq!(names(prefix("t-1-"), None, 10).await, ["t-1-a", "t-1-b"]);
    assert_eq!(names(prefix("t-1"), Some("t-1-a"), 1).await, ["t-1-b"]);
    assert_eq!(names(prefix("t-"), None, 10).await.len(), 4, "not t.");
    assert!(names(prefix("v"), None, 10).await.is_empty());
    let paused = ScheduleFilter {
        paused: Some(true),
        ..Default::default()
    };
    assert_eq!(names(paused.clone(), None, 10).await, ["t-1-b"]);
    let active = ScheduleFilter {
        paused: Some(false),
        ..prefix("t-1")
    };
    assert_eq!(names(active.clone(), None, 10).await, ["t-1-a", "t-10"]);
    let failing = ScheduleFilter {
        failing: true,
        ..Default::default()
    };
    assert_eq!(names(failing.clone(), None, 10).await, ["u-fails"]);
    for (filter, n) in [
        (ScheduleFilter::default(), 6),
        (prefix("t-1"), 3),
        (paused, 1),
        (active, 2),
        (failing, 1),
    ] {
        assert_eq!(
            store.schedule_count(filter.clone(), 100).await.unwrap(),
            n,
            "{filter:?}"
        );
    }
    // Counting stops one past its limit.
    assert_eq!(
        store
            .schedule_count(ScheduleFilter::default(), 2)
            .await
            .unwrap(),
        3
    );
}

/// The schedule's ledger, oldest first, as (nominal second, outcome).
async fn ledger(store: &Shared, name: &str) -> Vec<(i64, OccurrenceOutcome)> {
    let mut lines: Vec<(i64, OccurrenceOutcome)> = (store
        .occurrence_list(OccurrenceListParams {
            schedule: name.into(),
            limit: 100,
        })
        .await
        .unwrap()
        .into_iter())
    .map(|o| (o.nominal_at.duration_since(t0()).as_secs(), o.outcome))
    .collect();
    lines.sort_unstable_by_key(|l| l.0);
    lines
}

pub async fn a_schedule_ends_after_its_most_runs_and_at_its_end(store: &Shared) {
    use OccurrenceOutcome::Enqueued;
    let most = def("m", "every 10s")
        .overlap(OverlapPolicy::Allow)
        .max_runs(2);
    put(store, most.clone()).await;
    let s = store.schedule_get("m").await.unwrap();
    assert_eq!((s.max_runs, s.runs, s.ended.as_deref()), (Some(2), 0, None));
    store
        .schedule_materialise(pass(at(5), 30, &[]))
        .await
        .unwrap();
    assert_eq!(store.schedule_get("m").await.unwrap().runs, 1);
    // Its second run is its last: nothing comes after it, and it says why.
    store
        .schedule_materialise(pass(at(15), 30, &[]))
        .await
        .unwrap();
    let s = store.schedule_get("m").await.unwrap();
    assert_eq!((s.runs, s.unplanned_from), (2, None));
    assert_eq!(s.next_fire_at, Some(at(10)), "its runs, not started yet");
    assert_eq!(
        s.ended.as_deref(),
        Some("no more occurrences: it made its max_runs, 2 runs")
    );
    assert_eq!(store.schedule_next_look_at().await.unwrap(), None);
    let r = store
        .schedule_materialise(pass(at(100), 30, &[]))
        .await
        .unwrap();
    assert_eq!((r.planned, r.enqueued.len()), (0, 0));
    assert_eq!(ledger(store, "m").await, [(10, Enqueued), (20, Enqueued)]);
    // A run by hand is not one of its occurrences': not counted.
    let plan = sked_core::Plan {
        occurrences: vec![sked_core::PlannedOccurrence::new(
            at(101),
            Enqueued,
            Some("triggered by hand".into()),
        )],
        ..sked_core::Plan::default()
    };
    store
        .schedule_apply(ScheduleApplyParams {
            name: "m".into(),
            expected_next_fire_at: None,
            plan,
            template: s.template().unwrap(),
            now: at(101),
        })
        .await
        .unwrap();
    assert_eq!(store.schedule_get("m").await.unwrap().runs, 2);
    // Written again as it was, it stays ended; with one more run allowed, it makes it.
    put(store, most.clone()).await;
    let s = store.schedule_get("m").await.unwrap();
    assert_eq!((s.unplanned_from, s.ended.is_some()), (None, true));
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: most.clone().max_runs(3),
            next_fire_at: Some(at(110)),
            now: at(102),
        })
        .await
        .unwrap();
    let s = store.schedule_get("m").await.unwrap();
    assert_eq!((s.runs, s.max_runs, s.ended.as_deref()), (2, Some(3), None));
    store
        .schedule_materialise(pass(at(105), 30, &[]))
        .await
        .unwrap();
    let s = store.schedule_get("m").await.unwrap();
    assert_eq!((s.runs, s.unplanned_from), (3, None));
    assert!(s.ended.is_some());
    assert_eq!(
        ledger(store, "m").await,
        [
            (10, Enqueued),
            (20, Enqueued),
            (101, Enqueued),
            (110, Enqueued)
        ]
    );

    // Bounded by time: 10 and 20 run, 30 is after its end.
    let bounded = def("e", "every 10s")
        .overlap(OverlapPolicy::Allow)
        .start_at(at(0))
        .end_at(at(25));
    put(store, bounded.clone()).await;
    for now in [5, 15, 25, 35] {
        store
            .schedule_materialise(pass(at(now), 30, &[]))
            .await
            .unwrap();
    }
    let s = store.schedule_get("e").await.unwrap();
    assert_eq!((s.start_at, s.end_at), (Some(at(0)), Some(at(25))));
    assert_eq!((s.runs, s.unplanned_from, s.max_runs), (2, None, None));
    assert_eq!(
        s.ended,
        Some(format!("no more occurrences: its end_at is {}", at(25)))
    );
    assert_eq!(ledger(store, "e").await, [(10, Enqueued), (20, Enqueued)]);
    // The same definition again changes nothing.
    let report = store
        .schedule_write_many(ScheduleWriteParams {
            schedules: vec![DeclaredSchedule {
                def: bounded,
                next_fire_at: Some(at(40)),
            }],
            group: None,
            prune: false,
            dry_run: false,
            now: at(40),
        })
        .await
        .unwrap();
    assert_eq!(report.unchanged, ["e"]);
}

pub async fn a_calendar_excludes_its_dates_and_stays_while_skipped(store: &Shared) {
    use OccurrenceOutcome::{Enqueued, Excluded};
    let dates = |s: &str| sked_core::parse_dates(s).unwrap();
    let put_calendar =
        |def: sked_core::CalendarDef| store.calendar_put(CalendarPutParams { def, now: t0() });
    // A schedule cannot skip a calendar that does not exist.
    let daily = def("d", "0 9 * * *")
        .overlap(OverlapPolicy::Allow)
        .skip_calendar("holidays");
    let e = store
        .schedule_upsert(ScheduleUpsertParams {
            def: daily.clone(),
            next_fire_at: Some(at(9 * 3600)),
            now: t0(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("holidays"), "{e}");
    assert_eq!(
        store.schedule_get("d").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Sorted, each once; replaced whole.
    let c = put_calendar(sked_core::CalendarDef::new(
        "holidays",
        dates("2026-01-03,2026-01-02,2026-01-02"),
    ))
    .await
    .unwrap();
    assert_eq!(c.dates, dates("2026-01-02,2026-01-03"));
    let bad = put_calendar(sked_core::CalendarDef::new("holidays", []))
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Invalid);
    assert_eq!(store.calendar_get("holidays").await.unwrap().dates.len(), 2);
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: daily,
            next_fire_at: Some(at(9 * 3600)),
            now: t0(),
        })
        .await
        .unwrap();
    // Four days of 09:00: the 2nd and 3rd are excluded and say by what; excluded ones are
    // not runs.
    for day in 0..4 {
        store
            .schedule_materialise(pass(at(day * 86_400 + 9 * 3600 + 1), 0, &[]))
            .await
            .unwrap();
    }
    let lines = store
        .occurrence_list(OccurrenceListParams {
            schedule: "d".into(),
            limit: 10,
        })
        .await
        .unwrap();
    let mut seen: Vec<(i64, OccurrenceOutcome, Option<String>)> = (lines.into_iter())
        .map(|o| {
            let day = o.nominal_at.duration_since(t0()).as_secs() / 86_400;
            (day, o.outcome, o.detail)
        })
        .collect();
    seen.sort_unstable_by_key(|l| l.0);
    let by = Some("excluded by calendar holidays".to_string());
    assert_eq!(
        seen,
        [
            (0, Enqueued, None),
            (1, Excluded, by.clone()),
            (2, Excluded, by),
            (3, Enqueued, None)
        ]
    );
    assert_eq!(store.schedule_get("d").await.unwrap().runs, 2);
    assert_eq!(
        store.schedule_get("d").await.unwrap().skip_calendars,
        ["holidays"]
    );
    // Kept while a schedule skips it; gone once none does.
    let e = store.calendar_delete("holidays").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert!(e.to_string().contains("schedule d"), "{e}");
    assert_eq!(store.calendar_list().await.unwrap().len(), 1);
    assert!(store.schedule_delete("d", at(5 * 86_400)).await.unwrap());
    assert!(store.calendar_delete("holidays").await.unwrap());
    assert!(!store.calendar_delete("holidays").await.unwrap());
    assert_eq!(
        store.calendar_get("holidays").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
}
