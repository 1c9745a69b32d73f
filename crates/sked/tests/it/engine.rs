//! Engine behaviour over a real SQLite file, with time moved by a manual clock.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sked::maintenance::{Rescuer, Scheduler, SchedulerConfig};
use sked::store::FinishOutcome;
use sked::{ClaimRequest, Engine, EngineConfig, TaskFilter};
use sked_core::{
    CatchupPolicy, ManualClock, NewTask, OccurrenceOutcome, OverlapPolicy, ScheduleDef, TaskState,
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
    let config = EngineConfig::default().node_id("test");
    let engine = Engine::with_clock(store, Arc::new(clock.clone()), config);
    Env {
        engine,
        clock,
        _dir: dir,
    }
}

impl Env {
    async fn materialise(&self) -> sked::Result<Vec<sked_core::TaskId>> {
        Scheduler::default().pass(&self.engine).await
    }

    async fn rescue(&self) -> sked::Result<Vec<sked_core::TaskId>> {
        Ok(Rescuer::default().pass(&self.engine).await?.rescued)
    }

    fn advance(&self, secs: i64) {
        self.clock.advance(SignedDuration::from_secs(secs));
    }

    async fn claim(&self, max: u32) -> Vec<sked_core::Task> {
        self.engine
            .claim(ClaimRequest {
                worker: "w".into(),
                max,
                ..Default::default()
            })
            .await
            .unwrap()
    }

    async fn schedule(
        &self,
        name: &str,
        spec: &str,
        tz: &str,
        overlap: OverlapPolicy,
        catchup: CatchupPolicy,
    ) {
        self.engine
            .schedule_put(
                ScheduleDef::new(
                    name,
                    spec,
                    TaskTemplate::new("k").payload(json!({})).max_attempts(3),
                )
                .tz(tz)
                .overlap(overlap)
                .catchup(catchup, SignedDuration::from_hours(1)),
            )
            .await
            .unwrap();
    }

    async fn schedule_tasks(&self, name: &str) -> Vec<sked_core::Task> {
        let mut t = self
            .engine
            .tasks(TaskFilter::new().schedule(name).limit(1000))
            .await
            .unwrap();
        t.reverse();
        t
    }

    async fn ledger(&self, name: &str) -> Vec<(OccurrenceOutcome, String)> {
        let mut l: Vec<_> = self
            .engine
            .occurrences(name, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|o| (o.outcome, o.nominal_at.to_string()))
            .collect();
        l.reverse();
        l
    }
}

#[tokio::test]
async fn retries_back_off_until_dead() {
    let e = env("2026-01-01T00:00:00Z");
    let mut t = NewTask::new("flaky");
    t.max_attempts = 4;
    let id = e.engine.enqueue(t).await.unwrap().id;
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let c = e.claim(1).await;
        assert_eq!(c.len(), 1, "attempt {attempt} is due");
        let done = e
            .engine
            .finish(
                id,
                attempt,
                FinishOutcome::Failed {
                    error: format!("fail {attempt}"),
                    retryable: true,
                },
            )
            .await
            .unwrap();
        if attempt < 4 {
            assert_eq!(done.state, TaskState::Retrying);
            let delay = done.run_at.duration_since(e.engine.now());
            delays.push(delay);
            // Not claimable before its backoff passes.
            e.clock.advance(delay - SignedDuration::from_millis(1));
            assert!(e.claim(1).await.is_empty());
            e.clock.advance(SignedDuration::from_millis(1));
        } else {
            assert_eq!(done.state, TaskState::Dead);
            assert_eq!(done.last_error.as_deref(), Some("fail 4"));
        }
    }
    // 10 s, 20 s, 40 s, each within ±20 % jitter.
    for (i, d) in delays.iter().enumerate() {
        let base = 10.0 * 2f64.powi(i as i32);
        let secs = d.as_secs_f64();
        assert!(
            secs >= base * 0.8 && secs <= base * 1.2,
            "delay {i} was {secs}s"
        );
    }
    assert_eq!(e.engine.task(id).await.unwrap().attempts.len(), 4);
}

#[tokio::test]
async fn expired_lease_is_rescued_and_the_stale_worker_is_fenced_off() {
    let e = env("2026-01-01T00:00:00Z");
    let id = e.engine.enqueue(NewTask::new("k")).await.unwrap().id;
    let old = e.claim(1).await.remove(0);
    e.advance(29);
    assert!(e.rescue().await.unwrap().is_empty(), "lease still valid");
    e.engine
        .heartbeat(id, old.attempt, None, None)
        .await
        .unwrap();
    e.advance(29);
    assert!(
        e.rescue().await.unwrap().is_empty(),
        "the heartbeat extended it"
    );
    e.advance(2);
    assert_eq!(e.rescue().await.unwrap(), vec![id]);
    let new = e.claim(1).await.remove(0);
    assert_eq!(new.attempt, old.attempt + 1);
    let hb = e
        .engine
        .heartbeat(id, old.attempt, None, None)
        .await
        .unwrap_err();
    assert_eq!(hb.kind(), sked::store::ErrorKind::Conflict);
    let stale = e
        .engine
        .finish(id, old.attempt, FinishOutcome::Succeeded { result: None })
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), sked::store::ErrorKind::Conflict);
    let done = e
        .engine
        .finish(
            id,
            new.attempt,
            FinishOutcome::Succeeded {
                result: Some(json!("new")),
            },
        )
        .await
        .unwrap();
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(done.result, Some(json!("new")));
}

/// Two occurrences of an every-minute schedule while the first run is still pending.
async fn overlap(policy: OverlapPolicy) -> (Env, Vec<sked_core::Task>) {
    let e = env("2026-01-01T00:00:30Z");
    e.schedule("s", "* * * * *", "UTC", policy, CatchupPolicy::Latest)
        .await;
    e.clock.set("2026-01-01T00:01:00Z".parse().unwrap());
    assert_eq!(e.materialise().await.unwrap().len(), 1);
    e.clock.set("2026-01-01T00:02:00Z".parse().unwrap());
    e.materialise().await.unwrap();
    let tasks = e.schedule_tasks("s").await;
    (e, tasks)
}

#[tokio::test]
async fn overlap_skip_records_the_skipped_occurrence() {
    let (e, tasks) = overlap(OverlapPolicy::Skip).await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        e.ledger("s").await,
        vec![
            (OccurrenceOutcome::Enqueued, "2026-01-01T00:01:00Z".into()),
            (OccurrenceOutcome::Skipped, "2026-01-01T00:02:00Z".into()),
        ]
    );
}

#[tokio::test]
async fn overlap_allow_runs_both() {
    let (_e, tasks) = overlap(OverlapPolicy::Allow).await;
    assert_eq!(tasks.len(), 2);
    assert!(tasks.iter().all(|t| t.state == TaskState::Available));
}

#[tokio::test]
async fn overlap_buffer_one_runs_once_after_the_current_run() {
    let (e, tasks) = overlap(OverlapPolicy::BufferOne).await;
    assert_eq!(tasks.len(), 1);
    e.clock.set("2026-01-01T00:03:00Z".parse().unwrap());
    e.materialise().await.unwrap();
    assert_eq!(
        e.schedule_tasks("s").await.len(),
        1,
        "only one occurrence is buffered"
    );
    // The current run ends: the buffered occurrence runs.
    let c = e.claim(1).await.remove(0);
    e.engine
        .finish(c.id, c.attempt, FinishOutcome::Succeeded { result: None })
        .await
        .unwrap();
    e.materialise().await.unwrap();
    let tasks = e.schedule_tasks("s").await;
    assert_eq!(tasks.len(), 2);
    assert_eq!(
        tasks[1].nominal_at,
        Some("2026-01-01T00:02:00Z".parse().unwrap())
    );
    assert_eq!(
        e.ledger("s").await,
        vec![
            (OccurrenceOutcome::Enqueued, "2026-01-01T00:01:00Z".into()),
            (OccurrenceOutcome::Enqueued, "2026-01-01T00:02:00Z".into()),
            (OccurrenceOutcome::Skipped, "2026-01-01T00:03:00Z".into()),
        ]
    );
}

#[tokio::test]
async fn overlap_replace_cancels_the_current_run() {
    let (e, tasks) = overlap(OverlapPolicy::Replace).await;
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0].state, TaskState::Cancelled);
    assert_eq!(tasks[1].state, TaskState::Available);
    // A running task is asked to stop instead.
    let running = e.claim(1).await.remove(0);
    e.clock.set("2026-01-01T00:03:00Z".parse().unwrap());
    e.materialise().await.unwrap();
    let t = e.engine.task(running.id).await.unwrap();
    assert_eq!(t.state, TaskState::Running);
    assert!(t.cancel_requested);
}

/// An every-minute schedule whose scheduler was down from 00:00:30 to 00:10:30.
async fn downtime(policy: CatchupPolicy, down_for: i64) -> Env {
    let e = env("2026-01-01T00:00:30Z");
    e.schedule("s", "* * * * *", "UTC", OverlapPolicy::Allow, policy)
        .await;
    e.advance(down_for);
    e.materialise().await.unwrap();
    e
}

#[tokio::test]
async fn catchup_latest_runs_the_most_recent_missed_occurrence_once() {
    let e = downtime(CatchupPolicy::Latest, 600).await;
    let tasks = e.schedule_tasks("s").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        tasks[0].nominal_at,
        Some("2026-01-01T00:10:00Z".parse().unwrap())
    );
    let ledger = e.ledger("s").await;
    assert_eq!(ledger.len(), 10);
    assert_eq!(
        ledger
            .iter()
            .filter(|(o, _)| *o == OccurrenceOutcome::Missed)
            .count(),
        9
    );
    assert_eq!(
        e.engine.schedule("s").await.unwrap().next_fire_at,
        Some("2026-01-01T00:11:00Z".parse().unwrap())
    );
}

#[tokio::test]
async fn catchup_all_runs_every_missed_occurrence() {
    let e = downtime(CatchupPolicy::All, 600).await;
    let tasks = e.schedule_tasks("s").await;
    assert_eq!(tasks.len(), 10);
    assert!(
        e.ledger("s")
            .await
            .iter()
            .all(|(o, _)| *o == OccurrenceOutcome::Enqueued)
    );
}

#[tokio::test]
async fn catchup_none_runs_nothing_missed() {
    let e = downtime(CatchupPolicy::None, 600).await;
    assert!(e.schedule_tasks("s").await.is_empty());
    assert!(
        e.ledger("s")
            .await
            .iter()
            .all(|(o, _)| *o == OccurrenceOutcome::Missed)
    );
    // On time again afterwards.
    e.clock.set("2026-01-01T00:11:00Z".parse().unwrap());
    e.materialise().await.unwrap();
    assert_eq!(e.schedule_tasks("s").await.len(), 1);
}

#[tokio::test]
async fn catchup_ignores_occurrences_older_than_the_window() {
    // Down for three hours with a one-hour window, policy `all`.
    let e = downtime(CatchupPolicy::All, 3 * 3600).await;
    let tasks = e.schedule_tasks("s").await;
    assert_eq!(tasks.len(), 60, "one hour of occurrences");
    let ledger = e.ledger("s").await;
    assert_eq!(
        ledger[0].0,
        OccurrenceOutcome::Missed,
        "older ones summarised in one line"
    );
    let summary = e
        .engine
        .occurrences("s", 1000)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(summary.detail.unwrap().contains("missed 120 occurrences"));
}

/// An every-second schedule with catch-up `all` and a 30-day window, after a 30-day gap:
/// the most recent 1,000 occurrences run, the 2.6 million before them are one ledger line.
#[tokio::test]
async fn catchup_all_after_a_long_gap_runs_at_most_the_limit() {
    for (spec, policy) in [
        ("* * * * * *", CatchupPolicy::All),
        ("every 1s", CatchupPolicy::All),
        ("* * * * * *", CatchupPolicy::Latest),
    ] {
        let e = env("2026-01-01T00:00:00Z");
        let mut def = ScheduleDef::new("s", spec, TaskTemplate::new("k"));
        def.catchup = policy;
        def.overlap = OverlapPolicy::Allow;
        def.catchup_window = SignedDuration::from_hours(24 * 30);
        e.engine.schedule_put(def).await.unwrap();
        e.advance(30 * 24 * 3600);
        let started = std::time::Instant::now();
        let enqueued = e.materialise().await.unwrap();
        let took = started.elapsed();
        let want = if policy == CatchupPolicy::All {
            sked_core::DEFAULT_CATCHUP_LIMIT
        } else {
            1
        };
        assert_eq!(enqueued.len(), want, "{spec} {policy}");
        let ledger = e.engine.occurrences("s", 5000).await.unwrap();
        assert!(
            ledger.len() <= sked_core::DEFAULT_CATCHUP_LIMIT + 1,
            "{}",
            ledger.len()
        );
        let summary = ledger.last().unwrap();
        assert_eq!(summary.outcome, OccurrenceOutcome::Missed);
        let detail = summary.detail.as_deref().unwrap();
        assert!(detail.starts_with("missed "), "{detail}");
        // Caught up: the next pass has nothing late left.
        assert_eq!(
            e.engine.schedule("s").await.unwrap().next_fire_at,
            Some("2026-01-31T00:00:01Z".parse().unwrap())
        );
        assert!(e.materialise().await.unwrap().is_empty());
        eprintln!(
            "{spec} {policy}: {} enqueued, plan and apply took {took:?}; {detail}",
            enqueued.len()
        );
    }
}

/// A pass stops after its budget of enqueued tasks; the schedules still due are the next
/// pass's.
#[tokio::test]
async fn a_pass_enqueues_at_most_its_budget() {
    let e = env("2026-01-01T00:00:00Z");
    for name in ["a", "b", "c"] {
        let mut def = ScheduleDef::new(name, "every 1s", TaskTemplate::new("k"));
        def.catchup = CatchupPolicy::All;
        def.overlap = OverlapPolicy::Allow;
        e.engine.schedule_put(def).await.unwrap();
    }
    e.advance(1800);
    let mut config = SchedulerConfig::default();
    config.max_enqueued_per_pass = 1500;
    let scheduler = Scheduler::new(config);
    assert_eq!(scheduler.pass(&e.engine).await.unwrap().len(), 2000);
    assert_eq!(scheduler.pass(&e.engine).await.unwrap().len(), 1000);
    assert!(scheduler.pass(&e.engine).await.unwrap().is_empty());
}

#[tokio::test]
async fn berlin_schedule_across_both_dst_changes() {
    let e = env("2026-03-27T12:00:00Z");
    e.schedule(
        "fixed",
        "30 2 * * *",
        "Europe/Berlin",
        OverlapPolicy::Allow,
        CatchupPolicy::Latest,
    )
    .await;
    e.schedule(
        "hourly",
        "0 * * * *",
        "Europe/Berlin",
        OverlapPolicy::Allow,
        CatchupPolicy::Latest,
    )
    .await;
    // Step the clock from fire time to fire time, as the leader would.
    let run_until = |until: &'static str| {
        let e = &e;
        async move {
            let until: Timestamp = until.parse().unwrap();
            while let Some(next) = e.engine.store().schedule_next_fire_at().await.unwrap() {
                if next > until {
                    break;
                }
                e.clock.set(next);
                e.materialise().await.unwrap();
            }
        }
    };
    run_until("2026-03-30T12:00:00Z").await;
    let fixed: Vec<String> = e
        .schedule_tasks("fixed")
        .await
        .iter()
        .map(|t| t.nominal_at.unwrap().to_string())
        .collect();
    assert_eq!(
        fixed,
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    // Spring forward: 23 hourly runs on Mar 29 local time.
    let hourly = e.schedule_tasks("hourly").await;
    let mar29 = hourly
        .iter()
        .filter(|t| {
            t.nominal_at
                .unwrap()
                .to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").unwrap())
                .date()
                == jiff::civil::date(2026, 3, 29)
        })
        .count();
    assert_eq!(mar29, 23);

    e.clock.set("2026-10-23T12:00:00Z".parse().unwrap());
    // The schedules were idle for months: re-put them so they fire from now (a changed spec
    // would do the same); catch-up is not what this test is about.
    e.engine.schedule_pause("fixed").await.unwrap();
    e.engine.schedule_resume("fixed").await.unwrap();
    e.engine.schedule_pause("hourly").await.unwrap();
    e.engine.schedule_resume("hourly").await.unwrap();
    run_until("2026-10-26T12:00:00Z").await;
    let fixed: Vec<String> = e
        .schedule_tasks("fixed")
        .await
        .iter()
        .skip(3)
        .map(|t| t.nominal_at.unwrap().to_string())
        .collect();
    assert_eq!(
        fixed,
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
    let oct25 = e
        .schedule_tasks("hourly")
        .await
        .iter()
        .filter(|t| {
            t.nominal_at
                .unwrap()
                .to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").unwrap())
                .date()
                == jiff::civil::date(2026, 10, 25)
        })
        .count();
    assert_eq!(oct25, 25, "fall back: 25 hourly runs");
}

/// Waits (in real time) until `n` claims wait on the engine.
async fn until_waiting(engine: &Engine, n: usize) {
    let started = std::time::Instant::now();
    while engine.waiting_claims() != n {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{} claims wait, not {n}",
            engine.waiting_claims()
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

fn waiting_claim(engine: &Engine) -> tokio::task::JoinHandle<Vec<sked_core::Task>> {
    let engine = engine.clone();
    tokio::spawn(async move {
        engine
            .claim(ClaimRequest {
                worker: "w".into(),
                max: 10,
                wait: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            })
            .await
            .unwrap()
    })
}

#[tokio::test]
async fn a_task_enqueued_here_goes_straight_to_a_waiting_claim() {
    let e = env("2026-01-01T00:00:00Z");
    let claim = waiting_claim(&e.engine);
    until_waiting(&e.engine, 1).await;
    let inserted = e.engine.enqueue(NewTask::new("k")).await.unwrap();
    assert_eq!(inserted.state, TaskState::Running, "leased in its insert");
    let got = claim.await.unwrap();
    assert_eq!(got.len(), 1);
    let now = e.engine.now();
    let stored = e.engine.task(inserted.id).await.unwrap();
    for t in [&got[0], &stored] {
        assert_eq!(t.id, inserted.id);
        assert_eq!((t.state, t.attempt), (TaskState::Running, 1));
        assert_eq!(t.worker.as_deref(), Some("w"));
        assert_eq!(
            t.lease_expires_at,
            Some(now + SignedDuration::from_secs(30))
        );
    }
    assert_eq!(e.engine.waiting_claims(), 0);
    assert!(e.claim(10).await.is_empty(), "claimed once");
}

#[tokio::test]
async fn a_task_of_a_paused_queue_is_not_handed_over() {
    let e = env("2026-01-01T00:00:00Z");
    e.engine
        .queue_update(sked::store::QueueUpdateParams {
            name: "held".into(),
            paused: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut claim = waiting_claim(&e.engine);
    until_waiting(&e.engine, 1).await;
    let mut held = NewTask::new("k");
    held.queue = "held".into();
    let inserted = e.engine.enqueue(held).await.unwrap();
    assert_eq!(inserted.state, TaskState::Available);
    // The claim looked (the paused queue gives nothing) and waits again.
    until_waiting(&e.engine, 1).await;
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(50), &mut claim)
            .await
            .is_err()
    );
    let open = e.engine.enqueue(NewTask::new("k")).await.unwrap();
    assert_eq!(open.state, TaskState::Running);
    let got = claim.await.unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![open.id]);
}

#[tokio::test]
async fn a_batch_a_due_later_task_and_a_keyed_task_are_not_handed_over() {
    let e = env("2026-01-01T00:00:00Z");
    let claim = waiting_claim(&e.engine);
    until_waiting(&e.engine, 1).await;
    let mut later = NewTask::new("k");
    later.run_at = Some(e.engine.now() + SignedDuration::from_secs(60));
    assert_eq!(
        e.engine.enqueue(later).await.unwrap().state,
        TaskState::Scheduled
    );
    until_waiting(&e.engine, 1).await;
    let mut keyed = NewTask::new("k");
    keyed.unique_key = Some("once".into());
    let keyed = e.engine.enqueue(keyed).await.unwrap();
    assert_eq!(keyed.state, TaskState::Available);
    // The claim takes it the usual way, woken by the enqueue.
    let got = claim.await.unwrap();
    assert_eq!(got.iter().map(|t| t.id).collect::<Vec<_>>(), vec![keyed.id]);
    let claim = waiting_claim(&e.engine);
    until_waiting(&e.engine, 1).await;
    let batch = e
        .engine
        .enqueue_many(vec![NewTask::new("a"), NewTask::new("b")])
        .await
        .unwrap();
    assert!(batch.iter().all(|i| i.state == TaskState::Available));
    assert_eq!(claim.await.unwrap().len(), 2);
}

/// A batch of endings is recorded at one moment, on the real clock: its successes share one
/// finish time (so a store may write them with one statement), and each answer says what the
/// stored task says.
#[tokio::test]
async fn a_batch_of_endings_ends_at_one_moment() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    let engine = Engine::new(store, EngineConfig::default().node_id("test"));
    let tasks = (0..200).map(|i| NewTask::new(["a", "b"][i % 2])).collect();
    engine.enqueue_many(tasks).await.unwrap();
    let claimed = engine
        .claim(ClaimRequest {
            worker: "w".into(),
            max: 200,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 200);
    let items = claimed
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let result = (i % 3 == 0).then(|| json!({ "i": i }));
            (t.id, t.attempt, FinishOutcome::Succeeded { result })
        })
        .collect();
    let answers = engine.finish_many(items).await.unwrap();
    let mut at = Vec::new();
    for answer in answers {
        let ended = answer.unwrap();
        let stored = engine.task(ended.id).await.unwrap();
        assert_eq!(ended, sked::TaskEnded::from(&stored));
        assert_eq!(stored.state, TaskState::Succeeded);
        at.push(stored.finished_at.unwrap());
    }
    at.dedup();
    assert_eq!(at.len(), 1, "finish times: {at:?}");
}
