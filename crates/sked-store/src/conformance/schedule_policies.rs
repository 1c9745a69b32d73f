//! Schedule policies: stored and read back, jittered run times, dead runs in a row and the
//! pause they cause, and backfills that enqueue each past occurrence once.

use jiff::SignedDuration;
use sked_core::{DstPolicy, IntervalFrom, OccurrenceOutcome, OverlapPolicy, Plan, TaskState};

use super::schedules::{def, occ};
use super::*;

async fn put(store: &Shared, d: sked_core::ScheduleDef, next: Timestamp) -> Schedule {
    store
        .schedule_upsert(ScheduleUpsertParams {
            def: d,
            next_fire_at: Some(next),
            now: t0(),
        })
        .await
        .unwrap()
}

async fn apply(store: &Shared, name: &str, expected: Timestamp, plan: Plan) -> Vec<TaskId> {
    let template = store.schedule_get(name).await.unwrap().template().unwrap();
    let runs = store
        .schedule_apply(ScheduleApplyParams {
            name: name.into(),
            expected_next_fire_at: Some(expected),
            plan,
            template,
            now: expected,
        })
        .await
        .unwrap();
    runs.into_iter().map(|r| r.first).collect()
}

async fn due(store: &Shared, now: Timestamp) -> Vec<DueSchedule> {
    store
        .schedule_due(ScheduleDueParams { now, limit: 10 })
        .await
        .unwrap()
}

pub async fn schedule_policies_are_stored_and_read_back(store: &Shared) {
    let d = def("hourly", "every 1h")
        .from(IntervalFrom::LastFinish)
        .jitter(SignedDuration::from_secs(30))
        .pause_after_failures(3)
        .overlap(OverlapPolicy::AllowUpTo(2));
    let s = put(store, d.clone(), at(3600)).await;
    assert_eq!(
        (s.from, s.jitter, s.dst, s.pause_after_failures, s.overlap),
        (
            IntervalFrom::LastFinish,
            Some(SignedDuration::from_secs(30)),
            DstPolicy::Debian,
            Some(3),
            OverlapPolicy::AllowUpTo(2)
        )
    );
    assert_eq!(s.paused_reason, None);
    let cron = def("nightly", "30 2 * * *")
        .tz("Europe/Berlin")
        .dst(DstPolicy::Twice);
    let report = store
        .schedule_write_many(ScheduleWriteParams {
            group: Some("g".into()),
            prune: true,
            dry_run: false,
            schedules: vec![DeclaredSchedule {
                def: cron.clone(),
                next_fire_at: Some(at(3600)),
            }],
            now: t0(),
        })
        .await
        .unwrap();
    assert_eq!(report.created, ["nightly"]);
    assert_eq!(
        store.schedule_get("nightly").await.unwrap().dst,
        DstPolicy::Twice
    );
    // Declared again the same: unchanged; with another DST policy: updated.
    let sync = |d: sked_core::ScheduleDef| {
        store.schedule_write_many(ScheduleWriteParams {
            group: Some("g".into()),
            prune: true,
            dry_run: false,
            schedules: vec![DeclaredSchedule {
                def: d,
                next_fire_at: Some(at(3600)),
            }],
            now: t0(),
        })
    };
    assert_eq!(sync(cron.clone()).await.unwrap().unchanged, ["nightly"]);
    let skip = cron.dst(DstPolicy::Skip);
    assert_eq!(sync(skip).await.unwrap().updated, ["nightly"]);
    assert_eq!(
        store.schedule_get("nightly").await.unwrap().dst,
        DstPolicy::Skip
    );
}

pub async fn a_jittered_occurrence_is_due_when_its_plan_says(store: &Shared) {
    put(store, def("j", "every 60s"), at(60)).await;
    let mut line = occ(at(60), OccurrenceOutcome::Enqueued);
    line.run_at = Some(at(67));
    let ids = apply(
        store,
        "j",
        at(60),
        Plan {
            occurrences: vec![line],
            next_fire_at: Some(at(120)),
            ..Plan::default()
        },
    )
    .await;
    let t = store.task_get(ids[0]).await.unwrap();
    assert_eq!(
        (t.state, t.run_at, t.nominal_at),
        (TaskState::Scheduled, at(67), Some(at(60)))
    );
    assert!(claim(store, 10, at(66)).await.is_empty());
    assert_eq!(claim(store, 10, at(67)).await.len(), 1);
}

pub async fn dead_runs_in_a_row_count_since_the_last_resume(store: &Shared) {
    let mut d = def("flaky", "every 60s").pause_after_failures(2);
    d.task.as_mut().unwrap().max_attempts = 1;
    put(store, d, at(60)).await;
    // Three runs: one dies, one succeeds, one dies.
    let mut ended = Vec::new();
    for (i, dies) in [(1, true), (2, false), (3, true)] {
        let now = at(60 * i);
        let plan = Plan {
            occurrences: vec![occ(now, OccurrenceOutcome::Enqueued)],
            next_fire_at: Some(at(60 * (i + 1))),
            ..Plan::default()
        };
        apply(store, "flaky", now, plan).await;
        let task = claim(store, 1, now).await.remove(0);
        let outcome = if dies {
            failed(false)
        } else {
            FinishOutcome::Succeeded { result: None }
        };
        ended.push(finish(store, task.id, 1, outcome, now).await.unwrap().state);
    }
    assert_eq!(
        ended,
        [TaskState::Dead, TaskState::Succeeded, TaskState::Dead]
    );
    // One dead run since the last that succeeded.
    assert_eq!(due(store, at(240)).await[0].dead_runs, 1);
    let plan = Plan {
        occurrences: vec![occ(at(240), OccurrenceOutcome::Enqueued)],
        next_fire_at: Some(at(300)),
        ..Plan::default()
    };
    apply(store, "flaky", at(240), plan).await;
    let task = claim(store, 1, at(240)).await.remove(0);
    finish(store, task.id, 1, failed(false), at(240))
        .await
        .unwrap();
    assert_eq!(due(store, at(300)).await[0].dead_runs, 2);
    // Paused for it, the schedule says why; resumed, the dead runs before no longer count.
    let paused = store
        .schedule_set_paused(SchedulePauseParams {
            name: "flaky".into(),
            paused: true,
            reason: Some("2 runs in a row ended dead".into()),
            next_fire_at: None,
            now: at(300),
        })
        .await
        .unwrap();
    assert_eq!(
        paused.paused_reason.as_deref(),
        Some("2 runs in a row ended dead")
    );
    assert!(due(store, at(300)).await.is_empty());
    let resumed = store
        .schedule_set_paused(SchedulePauseParams {
            name: "flaky".into(),
            paused: false,
            reason: None,
            next_fire_at: Some(at(360)),
            now: at(301),
        })
        .await
        .unwrap();
    assert_eq!(resumed.paused_reason, None);
    assert_eq!(due(store, at(360)).await[0].dead_runs, 0);
    // A schedule without the policy counts nothing.
    put(store, def("plain", "every 60s"), at(60)).await;
    let plain = due(store, at(360)).await;
    let plain = plain.iter().find(|d| d.schedule.name == "plain").unwrap();
    assert_eq!(plain.dead_runs, 0);
}

pub async fn a_backfill_enqueues_each_past_occurrence_once(store: &Shared) {
    put(store, def("b", "every 60s"), at(60)).await;
    // 60 s ran, 120 s was skipped; 180 s has no line. The schedule is at 240 s.
    let plan = Plan {
        occurrences: vec![
            occ(at(60), OccurrenceOutcome::Enqueued),
            occ(at(120), OccurrenceOutcome::Skipped),
        ],
        next_fire_at: Some(at(240)),
        ..Plan::default()
    };
    let ran = apply(store, "b", at(60), plan).await;
    let backfill = |nominals: Vec<Timestamp>| {
        store.schedule_backfill(ScheduleBackfillParams {
            name: "b".into(),
            nominals,
            now: at(250),
        })
    };
    // Not yet past: refused, nothing changed.
    let e = backfill(vec![at(180), at(240)]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    let ledger = || {
        store.occurrence_list(OccurrenceListParams {
            schedule: "b".into(),
            limit: 10,
        })
    };
    assert_eq!(ledger().await.unwrap().len(), 2);
    let report = backfill(vec![at(0), at(60), at(120), at(180)])
        .await
        .unwrap();
    assert_eq!(report.already, 1);
    let enqueued: Vec<Timestamp> = report.enqueued.iter().map(|r| r.nominal_at).collect();
    assert_eq!(enqueued, [at(0), at(120), at(180)]);
    for run in &report.enqueued {
        let t = store.task_get(run.task_id).await.unwrap();
        assert_eq!(
            (t.schedule.as_deref(), t.nominal_at, t.state),
            (Some("b"), Some(run.nominal_at), TaskState::Available)
        );
    }
    let lines = ledger().await.unwrap();
    assert_eq!(lines.len(), 4);
    assert!(
        lines
            .iter()
            .all(|l| l.outcome == OccurrenceOutcome::Enqueued)
    );
    let skipped_before = lines.iter().find(|l| l.nominal_at == at(120)).unwrap();
    assert_eq!(
        skipped_before.detail.as_deref(),
        Some(crate::rules::BACKFILLED)
    );
    assert_eq!(
        lines
            .iter()
            .find(|l| l.nominal_at == at(60))
            .unwrap()
            .task_id,
        Some(ran[0])
    );
    // Again: every occurrence has its run.
    let again = backfill(vec![at(0), at(60), at(120), at(180)])
        .await
        .unwrap();
    assert_eq!((again.already, again.enqueued.len()), (4, 0));
    let e = store
        .schedule_backfill(ScheduleBackfillParams {
            name: "nope".into(),
            nominals: vec![at(0)],
            now: at(250),
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}
