//! Schedule policies driven by the engine on a manual clock over a real SQLite file: DST
//! policies across both of Berlin's 2026 changes, jitter that every node computes the same,
//! intervals counted from the last run's end, pausing after dead runs, and backfill.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sked::maintenance::Scheduler;
use sked::store::FinishOutcome;
use sked::{ClaimRequest, Engine, EngineConfig, TaskFilter};
use sked_core::{
    DstPolicy, IntervalFrom, ManualClock, OccurrenceOutcome, OverlapPolicy, ScheduleDef,
    TaskTemplate,
};

struct Env {
    engine: Engine,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

fn env(start: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    let clock = ManualClock::new(start.parse().unwrap());
    let engine = Engine::with_clock(
        store,
        Arc::new(clock.clone()),
        EngineConfig::default().node_id("test"),
    );
    Env {
        engine,
        clock,
        _dir: dir,
    }
}

impl Env {
    async fn materialise(&self) -> Vec<sked_core::TaskId> {
        Scheduler::default().pass(&self.engine).await.unwrap()
    }

    /// Moves the clock to the schedule's next fire time and materialises, until `until`;
    /// returns the nominal times of the tasks enqueued, in the zone's offset.
    async fn fire_until(&self, name: &str, until: &str) -> Vec<String> {
        let until: Timestamp = until.parse().unwrap();
        let mut fired = Vec::new();
        loop {
            let s = self.engine.schedule(name).await.unwrap();
            let next = s.next_fire_at.expect("a next fire time");
            if next > until {
                return fired;
            }
            self.clock.set(next);
            for id in self.materialise().await {
                let task = self.engine.task(id).await.unwrap();
                let zone = jiff::tz::TimeZone::get(&s.tz).unwrap();
                fired.push(
                    task.nominal_at
                        .unwrap()
                        .to_zoned(zone)
                        .strftime("%Y-%m-%dT%H:%M:%S%:z")
                        .to_string(),
                );
            }
        }
    }

    async fn claim_one(&self) -> sked_core::Task {
        let mut c = self
            .engine
            .claim(ClaimRequest {
                worker: "w".into(),
                max: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(c.len(), 1, "one task to claim");
        c.remove(0)
    }
}

/// Its runs are never worked here, so they may overlap.
fn nightly(dst: DstPolicy) -> ScheduleDef {
    ScheduleDef::new("nightly", "30 2 * * *", TaskTemplate::new("k"))
        .tz("Europe/Berlin")
        .dst(dst)
        .overlap(OverlapPolicy::Allow)
}

#[tokio::test]
async fn dst_skip_and_twice_across_both_berlin_changes_in_2026() {
    // Spring forward (Mar 29): skip leaves the day out; debian runs it after the gap.
    for (dst, expected) in [
        (
            DstPolicy::Skip,
            vec!["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"],
        ),
        (
            DstPolicy::Debian,
            vec![
                "2026-03-28T02:30:00+01:00",
                "2026-03-29T03:00:00+02:00",
                "2026-03-30T02:30:00+02:00",
            ],
        ),
    ] {
        let e = env("2026-03-27T12:00:00Z");
        e.engine.schedule_put(nightly(dst)).await.unwrap();
        let fired = e.fire_until("nightly", "2026-03-30T12:00:00Z").await;
        assert_eq!(fired, expected, "{dst} in March");
    }
    // Fall back (Oct 25): twice runs at both 02:30s; skip, like debian, once.
    for (dst, expected) in [
        (
            DstPolicy::Twice,
            vec![
                "2026-10-24T02:30:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-26T02:30:00+01:00",
            ],
        ),
        (
            DstPolicy::Skip,
            vec![
                "2026-10-24T02:30:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-26T02:30:00+01:00",
            ],
        ),
    ] {
        let e = env("2026-10-23T12:00:00Z");
        e.engine.schedule_put(nightly(dst)).await.unwrap();
        let fired = e.fire_until("nightly", "2026-10-26T12:00:00Z").await;
        assert_eq!(fired, expected, "{dst} in October");
        assert_eq!(e.engine.schedule("nightly").await.unwrap().dst, dst);
    }
}

#[tokio::test]
async fn jitter_gives_every_node_the_same_run_time() {
    let def = ScheduleDef::new("report", "0 * * * *", TaskTemplate::new("k"))
        .jitter(SignedDuration::from_mins(10));
    // Two nodes with stores of their own plan the same occurrence, one late: same run time.
    let mut run_ats = Vec::new();
    for late in [0, 95] {
        let e = env("2026-05-01T09:30:00Z");
        e.engine.schedule_put(def.clone()).await.unwrap();
        e.clock
            .set(Timestamp::from_second(1_777_629_600 + late).unwrap());
        let ids = e.materialise().await;
        assert_eq!(ids.len(), 1);
        let task = e.engine.task(ids[0]).await.unwrap();
        assert_eq!(task.nominal_at.unwrap().to_string(), "2026-05-01T10:00:00Z");
        run_ats.push(task.run_at);
    }
    assert_eq!(run_ats[0], run_ats[1]);
    let nominal: Timestamp = "2026-05-01T10:00:00Z".parse().unwrap();
    assert_eq!(
        run_ats[0],
        nominal + sked_core::jitter_offset("report", nominal, SignedDuration::from_mins(10))
    );
    assert!(run_ats[0].duration_since(nominal) < SignedDuration::from_mins(10));
}

#[tokio::test]
async fn an_interval_from_the_last_finish_starts_an_interval_after_each_run_ended() {
    let e = env("2026-01-01T00:00:00Z");
    e.engine
        .schedule_put(
            ScheduleDef::new("sync", "every 3s", TaskTemplate::new("k"))
                .from(IntervalFrom::LastFinish),
        )
        .await
        .unwrap();
    let mut starts = Vec::new();
    for _ in 0..3 {
        // Fire, run for 2 s, end; look every half second meanwhile.
        let next = e
            .engine
            .schedule("sync")
            .await
            .unwrap()
            .next_fire_at
            .unwrap();
        e.clock.set(next);
        assert_eq!(e.materialise().await.len(), 1);
        let task = e.claim_one().await;
        starts.push(e.engine.now());
        for _ in 0..4 {
            e.clock.advance(SignedDuration::from_millis(500));
            assert!(e.materialise().await.is_empty(), "nothing while it runs");
        }
        e.engine
            .finish(task.id, 1, FinishOutcome::Succeeded { result: None })
            .await
            .unwrap();
        e.clock.advance(SignedDuration::from_millis(2_500));
        assert!(
            e.materialise().await.is_empty(),
            "not before 3 s after the end"
        );
    }
    let gaps: Vec<i64> = starts
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_millis() as i64)
        .collect();
    assert_eq!(gaps, [5_000, 5_000]);
}

#[tokio::test]
async fn a_schedule_pauses_itself_after_dead_runs_and_counts_afresh_when_resumed() {
    let e = env("2026-01-01T00:00:00Z");
    e.engine
        .schedule_put(
            ScheduleDef::new("flaky", "every 60s", TaskTemplate::new("k").max_attempts(1))
                .pause_after_failures(2),
        )
        .await
        .unwrap();
    let engine = &e.engine;
    let die = |id| async move {
        engine
            .finish(
                id,
                1,
                FinishOutcome::Failed {
                    error: "boom".into(),
                    retryable: false,
                },
            )
            .await
            .unwrap()
    };
    for _ in 0..2 {
        e.clock.advance(SignedDuration::from_secs(60));
        assert_eq!(e.materialise().await.len(), 1);
        die(e.claim_one().await.id).await;
    }
    e.clock.advance(SignedDuration::from_secs(60));
    assert!(e.materialise().await.is_empty());
    let s = e.engine.schedule("flaky").await.unwrap();
    assert!(s.paused);
    assert_eq!(
        s.paused_reason.as_deref(),
        Some("paused itself: its last 2 runs in a row ended dead")
    );
    // Resumed, the old dead runs do not count: it runs again.
    e.clock.advance(SignedDuration::from_secs(1));
    let s = e.engine.schedule_resume("flaky").await.unwrap();
    assert_eq!(s.paused_reason, None);
    e.clock.set(s.next_fire_at.unwrap());
    assert_eq!(e.materialise().await.len(), 1);
}

#[tokio::test]
async fn a_backfill_enqueues_the_occurrences_that_did_not_run() {
    let e = env("2026-01-01T00:00:30Z");
    e.engine
        .schedule_put(
            ScheduleDef::new("m", "* * * * *", TaskTemplate::new("k"))
                .overlap(OverlapPolicy::Allow),
        )
        .await
        .unwrap();
    // 00:01 and 00:02 run; then it is paused through 00:05.
    for _ in 0..2 {
        let next = e.engine.schedule("m").await.unwrap().next_fire_at.unwrap();
        e.clock.set(next);
        assert_eq!(e.materialise().await.len(), 1);
    }
    e.engine.schedule_pause("m").await.unwrap();
    e.clock.set("2026-01-01T00:05:30Z".parse().unwrap());
    let t = |s: &str| s.parse::<Timestamp>().unwrap();
    let report = e
        .engine
        .schedule_backfill("m", t("2026-01-01T00:00:00Z"), t("2026-01-01T00:05:00Z"))
        .await
        .unwrap();
    let nominals: Vec<String> = report
        .enqueued
        .iter()
        .map(|r| r.nominal_at.to_string())
        .collect();
    assert_eq!(
        nominals,
        [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:03:00Z",
            "2026-01-01T00:04:00Z",
            "2026-01-01T00:05:00Z"
        ]
    );
    assert_eq!(report.already, 2);
    let tasks = e
        .engine
        .tasks(TaskFilter::new().schedule("m").limit(100))
        .await
        .unwrap();
    assert_eq!(tasks.len(), 6, "one task per occurrence");
    let ledger = e.engine.occurrences("m", 100).await.unwrap();
    assert!(
        ledger
            .iter()
            .all(|o| o.outcome == OccurrenceOutcome::Enqueued)
    );
    // Out of range or not past: refused.
    for (from, to) in [
        ("2026-01-01T00:05:00Z", "2026-01-01T00:01:00Z"),
        ("2026-01-01T00:05:00Z", "2026-01-01T00:07:00Z"),
    ] {
        let err = e
            .engine
            .schedule_backfill("m", t(from), t(to))
            .await
            .unwrap_err();
        assert!(matches!(err, sked::Error::Invalid(_)), "{err}");
    }
}
