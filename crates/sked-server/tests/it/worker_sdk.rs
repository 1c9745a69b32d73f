//! The Rust worker SDK, each case twice: embedded (on the engine and its SQLite store) and
//! remote (over HTTP to a real server on a loopback port, sharing that engine). Lease expiry
//! is driven by a manual clock; handler timeouts and waits use short real times with
//! generous limits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use serde_json::json;
use sked::maintenance::Rescuer;
use sked::worker::{HandlerResult, TaskContext, TaskError, Worker, WorkerReport};
use sked::{ClaimRequest, Client, Engine, EngineConfig, TaskFilter};
use sked_core::{ManualClock, NewTask, ScheduleDef, Task, TaskState};
use sked_store::FinishOutcome;
use tokio::sync::{Notify, watch};

/// Taken by the handler's first run and held across its `.await`s.
type DropGuard = Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;

/// A guard to put in a handler's future, and a receiver that resolves when the future is
/// dropped (stopped at a timeout or a lost lease) or ends: an event to wait for instead of
/// sleeping "long enough" to see that something did not happen.
fn on_drop() -> (DropGuard, tokio::sync::oneshot::Receiver<()>) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    (Arc::new(Mutex::new(Some(tx))), rx)
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Embedded,
    Remote,
}

struct Env {
    engine: Engine,
    client: Client,
    clock: Option<ManualClock>,
    _dir: tempfile::TempDir,
}

async fn env(mode: Mode, manual_clock: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    let clock = manual_clock.then(|| ManualClock::new("2026-06-01T00:00:00Z".parse().unwrap()));
    let engine = match &clock {
        Some(c) => Engine::with_clock(store, Arc::new(c.clone()), EngineConfig::default()),
        None => Engine::new(store, EngineConfig::default()),
    };
    let client = match mode {
        Mode::Embedded => Client::embedded(engine.clone()),
        Mode::Remote => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let app = sked_server::router(sked_server::AppState::new(engine.clone()));
            tokio::spawn(async move { axum::serve(listener, app).await });
            Client::remote(&url).unwrap()
        }
    };
    Env {
        engine,
        client,
        clock,
        _dir: dir,
    }
}

struct Running {
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<sked::Result<WorkerReport>>,
}

impl Running {
    async fn stop(self) -> WorkerReport {
        let _ = self.stop.send(true);
        self.handle.await.unwrap().unwrap()
    }
}

fn start(worker: Worker) -> Running {
    let (stop, mut rx) = watch::channel(false);
    let handle = tokio::spawn(worker.run(async move {
        let _ = rx.wait_for(|s| *s).await;
    }));
    Running { stop, handle }
}

async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_state(e: &Env, id: i64, want: TaskState) -> Task {
    wait_for(&format!("task {id} to be {want}"), || async {
        e.engine.task(id).await.unwrap().state == want
    })
    .await;
    e.engine.task(id).await.unwrap()
}

fn job(kind: &str, payload: serde_json::Value) -> NewTask {
    let mut t = NewTask::new(kind);
    t.payload = payload;
    t
}

/// An enqueue made while the caller's span is current continues its trace (embedded, and over
/// HTTP through the remote client), and the handler is given that context to pass on.
async fn an_enqueue_inside_a_trace_carries_it_to_the_handler(mode: Mode) {
    use opentelemetry::context::FutureExt as _;
    let e = env(mode, false).await;
    let (seen_tx, seen) = tokio::sync::oneshot::channel();
    let seen_tx = Arc::new(Mutex::new(Some(seen_tx)));
    let w = start(Worker::new(e.client.clone()).handle(
        "traced",
        move |ctx: TaskContext, _: serde_json::Value| {
            let seen_tx = seen_tx.clone();
            async move {
                if let Some(tx) = seen_tx.lock().unwrap().take() {
                    let _ = tx.send(ctx.traceparent().map(str::to_string));
                }
                HandlerResult::Ok(())
            }
        },
    ));
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let id = e
        .client
        .enqueue(job("traced", json!({})))
        .with_context(sked::telemetry::context_of(caller))
        .await
        .unwrap()
        .id;
    assert_eq!(seen.await.unwrap().as_deref(), Some(caller));
    let done = wait_state(&e, id, TaskState::Succeeded).await;
    assert_eq!(done.traceparent.as_deref(), Some(caller));
    w.stop().await;
}

#[derive(serde::Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

async fn typed_handlers_get_their_payload(mode: Mode) {
    let e = env(mode, false).await;
    let w = start(
        Worker::new(e.client.clone()).handle("add", |_ctx: TaskContext, p: Add| async move {
            HandlerResult::Ok(json!({"sum": p.a + p.b}))
        }),
    );
    let ok = e
        .client
        .enqueue(job("add", json!({"a": 2, "b": 3})))
        .await
        .unwrap()
        .id;
    let bad = e
        .client
        .enqueue(job("add", json!({"a": "x"})))
        .await
        .unwrap()
        .id;
    let done = wait_state(&e, ok, TaskState::Succeeded).await;
    assert_eq!(done.result, Some(json!({"sum": 5})));
    // A payload that does not fit is not retried: it never will.
    let dead = wait_state(&e, bad, TaskState::Dead).await;
    assert_eq!(dead.attempt, 1);
    assert!(
        dead.last_error
            .unwrap()
            .contains("does not fit kind \"add\""),
        "the error names the kind"
    );
    let report = w.stop().await;
    assert_eq!((report.succeeded, report.failed), (1, 1));
}

async fn a_timed_out_handler_is_stopped_and_retried(mode: Mode) {
    let e = env(mode, false).await;
    let finished_late = Arc::new(Mutex::new(false));
    let flag = finished_late.clone();
    let (guard, dropped) = on_drop();
    let w = start(Worker::new(e.client.clone()).handle(
        "slow",
        move |ctx: TaskContext, _: serde_json::Value| {
            let (flag, guard) = (flag.clone(), guard.clone());
            async move {
                if ctx.attempt() == 1 {
                    let _guard = guard.lock().unwrap().take();
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    *flag.lock().unwrap() = true;
                }
                HandlerResult::Ok(())
            }
        },
    ));
    let mut t = job("slow", json!(null));
    t.timeout = Some(SignedDuration::from_millis(200));
    t.backoff = Some(sked_core::Backoff::Fixed(SignedDuration::from_millis(10)));
    let id = e.client.enqueue(t).await.unwrap().id;
    let done = wait_state(&e, id, TaskState::Succeeded).await;
    assert_eq!(done.attempt, 2, "the timed-out attempt was retried");
    assert_eq!(done.attempts[0].outcome, "failed");
    assert_eq!(
        done.attempts[0].error.as_deref(),
        Some("timed out after 200ms")
    );
    // The first run was dropped at its timeout: its code after the sleep never ran, and now
    // never can.
    let _ = dropped.await;
    assert!(!*finished_late.lock().unwrap(), "the handler kept running");
    w.stop().await;
}

async fn a_panicking_handler_fails_and_the_worker_goes_on(mode: Mode) {
    let e = env(mode, false).await;
    let w = start(Worker::new(e.client.clone()).concurrency(1).handle(
        "fragile",
        |ctx: TaskContext, _: serde_json::Value| async move {
            if ctx.task().payload["explode"] == json!(true) {
                panic!("boom at {}", ctx.id());
            }
            HandlerResult::Ok(())
        },
    ));
    let mut t = job("fragile", json!({"explode": true}));
    t.max_attempts = 1;
    let bad = e.client.enqueue(t).await.unwrap().id;
    let dead = wait_state(&e, bad, TaskState::Dead).await;
    assert_eq!(
        dead.last_error.as_deref(),
        Some(format!("the handler panicked: boom at {bad}").as_str())
    );
    let fine = e
        .client
        .enqueue(job("fragile", json!({})))
        .await
        .unwrap()
        .id;
    wait_state(&e, fine, TaskState::Succeeded).await;
    let report = w.stop().await;
    assert_eq!((report.failed, report.succeeded), (1, 1));
}

async fn after_a_rescue_the_old_attempt_is_rejected(mode: Mode) {
    let e = env(mode, true).await;
    let clock = e.clock.clone().unwrap();
    let release = Arc::new(Notify::new());
    let r = release.clone();
    // Worker A: its handler finishes only when told to; its heartbeats (every 10 s of real
    // time) do not come during the test, so its lease expires on the manual clock.
    // One slot and no prefetch: A claims nothing more while its handler waits.
    let a = start(
        Worker::new(e.client.clone())
            .id("worker-a")
            .concurrency(1)
            .prefetch(0)
            .handle("k", move |_ctx: TaskContext, _: serde_json::Value| {
                let r = r.clone();
                async move {
                    r.notified().await;
                    HandlerResult::Ok(json!("from A"))
                }
            }),
    );
    let id = e.client.enqueue(job("k", json!(null))).await.unwrap().id;
    wait_state(&e, id, TaskState::Running).await;
    clock.advance(SignedDuration::from_secs(31));
    assert_eq!(
        Rescuer::default().pass(&e.engine).await.unwrap().rescued,
        vec![id]
    );
    // Attempt 2 goes to worker B.
    let b = e
        .engine
        .claim(ClaimRequest {
            worker: "worker-b".into(),
            kinds: vec!["k".into()],
            max: 1,
            ..ClaimRequest::default()
        })
        .await
        .unwrap();
    assert_eq!((b[0].id, b[0].attempt), (id, 2));
    // A's handler now finishes; A reports, and the report is refused.
    release.notify_one();
    let report = a.stop().await;
    assert_eq!(report.succeeded, 1, "A did report its result");
    let t = e.engine.task(id).await.unwrap();
    assert_eq!(
        (t.state, t.attempt),
        (TaskState::Running, 2),
        "A's complete changed nothing"
    );
    e.engine
        .finish(
            id,
            2,
            FinishOutcome::Succeeded {
                result: Some(json!("from B")),
            },
        )
        .await
        .unwrap();
    let t = e.engine.task(id).await.unwrap();
    assert_eq!(t.result, Some(json!("from B")));
    assert_eq!(t.attempts[0].outcome, "rescued");
}

async fn a_lost_lease_stops_the_handler(mode: Mode) {
    let e = env(mode, true).await;
    let clock = e.clock.clone().unwrap();
    let ran_on = Arc::new(Mutex::new(false));
    let flag = ran_on.clone();
    let (guard, dropped) = on_drop();
    // Heartbeats every 100 ms: the first one after the rescue learns the lease is gone.
    let a = start(
        Worker::new(e.client.clone())
            .lease_ttl(Duration::from_millis(300))
            .concurrency(1)
            .prefetch(0)
            .handle("k", move |ctx: TaskContext, _: serde_json::Value| {
                let (flag, guard) = (flag.clone(), guard.clone());
                async move {
                    if ctx.attempt() == 1 {
                        let _guard = guard.lock().unwrap().take();
                        tokio::time::sleep(Duration::from_secs(3)).await;
                        *flag.lock().unwrap() = true;
                    }
                    HandlerResult::Ok(())
                }
            }),
    );
    let id = e.client.enqueue(job("k", json!(null))).await.unwrap().id;
    wait_state(&e, id, TaskState::Running).await;
    // A heartbeat between the clock's move and the rescue would renew the lease: try again.
    let mut rescued = false;
    for _ in 0..20 {
        clock.advance(SignedDuration::from_secs(5));
        if Rescuer::default().pass(&e.engine).await.unwrap().rescued == vec![id] {
            rescued = true;
            break;
        }
    }
    assert!(rescued, "the lease never expired");
    // The worker drops the handler once a heartbeat hears the lease is gone.
    let _ = dropped.await;
    assert!(
        !*ran_on.lock().unwrap(),
        "the handler ran on after losing its lease"
    );
    // Its slot freed, the worker took the task's next attempt, which succeeds.
    let t = wait_state(&e, id, TaskState::Succeeded).await;
    let report = a.stop().await;
    assert_eq!((report.lost, report.succeeded), (1, 1));
    assert_eq!(t.attempt, 2);
    assert_eq!(
        t.attempts[0].outcome, "rescued",
        "nothing was reported for attempt 1"
    );
}

async fn urgent_work_overtakes_a_full_prefetch_buffer(mode: Mode) {
    let e = env(mode, false).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let gate = Arc::new(Notify::new());
    let (o, g) = (order.clone(), gate.clone());
    let w = start(
        Worker::new(e.client.clone())
            .concurrency(1)
            .prefetch(2)
            .handle("k", move |ctx: TaskContext, _: serde_json::Value| {
                let (o, g) = (o.clone(), g.clone());
                async move {
                    o.lock().unwrap().push(ctx.id());
                    if ctx.task().payload["wait"] == json!(true) {
                        g.notified().await;
                    }
                    HandlerResult::Ok(())
                }
            }),
    );
    let first = e
        .client
        .enqueue(job("k", json!({"wait": true})))
        .await
        .unwrap()
        .id;
    wait_state(&e, first, TaskState::Running).await;
    let low: Vec<i64> = e
        .client
        .enqueue_many(vec![job("k", json!({})), job("k", json!({}))])
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    // Both are claimed into the buffer (leased, waiting for the one slot).
    for id in &low {
        wait_state(&e, *id, TaskState::Running).await;
    }
    let mut urgent = job("k", json!({}));
    urgent.priority = 10;
    let urgent = e.client.enqueue(urgent).await.unwrap().id;
    // The worker trades its least urgent buffered task for the urgent one.
    wait_state(&e, low[1], TaskState::Available).await;
    wait_state(&e, urgent, TaskState::Running).await;
    gate.notify_one();
    for id in [urgent, low[0], low[1]] {
        wait_state(&e, id, TaskState::Succeeded).await;
    }
    assert_eq!(*order.lock().unwrap(), vec![first, urgent, low[0], low[1]]);
    let t = e.engine.task(low[1]).await.unwrap();
    assert_eq!(t.attempts[0].outcome, "released");
    assert_eq!(t.max_attempts, 26, "the release gave its attempt back");
    w.stop().await;
}

async fn shutdown_finishes_in_flight_and_releases_the_rest(mode: Mode) {
    let e = env(mode, false).await;
    let started = Arc::new(AtomicUsize::new(0));
    let counter = started.clone();
    let w = start(
        Worker::new(e.client.clone())
            .concurrency(2)
            .prefetch(2)
            .shutdown_grace(Duration::from_millis(500))
            .handle("k", move |_ctx: TaskContext, ms: u64| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    HandlerResult::Ok(())
                }
            }),
    );
    let ids: Vec<i64> = e
        .client
        .enqueue_many(vec![
            job("k", json!(300)),
            job("k", json!(60_000)),
            job("k", json!(1)),
            job("k", json!(1)),
        ])
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    for id in &ids {
        wait_state(&e, *id, TaskState::Running).await;
    }
    // `running` also covers the two claimed into the buffer; wait until both slots have begun.
    let since = Instant::now();
    while started.load(Ordering::SeqCst) < 2 {
        assert!(since.elapsed() < Duration::from_secs(15), "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The 60 s task outlives the 500 ms grace: it is stopped and given back (below).
    let report = w.stop().await;
    let state = |t: &Task| (t.state, t.attempts.last().map(|a| a.outcome.clone()));
    let tasks: Vec<Task> = futures_join(&e, &ids).await;
    assert_eq!(
        state(&tasks[0]),
        (TaskState::Succeeded, Some("succeeded".into()))
    );
    // Past the grace period: stopped and given back, claimable at once.
    assert_eq!(
        state(&tasks[1]),
        (TaskState::Available, Some("released".into()))
    );
    // Never started: given back at once.
    assert_eq!(
        state(&tasks[2]),
        (TaskState::Available, Some("released".into()))
    );
    assert_eq!(
        state(&tasks[3]),
        (TaskState::Available, Some("released".into()))
    );
    assert_eq!((report.succeeded, report.released), (1, 3));
    let running = e
        .engine
        .tasks(TaskFilter::new().state(TaskState::Running).limit(10))
        .await
        .unwrap();
    assert!(running.is_empty(), "nothing is left running");
}

async fn futures_join(e: &Env, ids: &[i64]) -> Vec<Task> {
    let mut out = Vec::new();
    for id in ids {
        out.push(e.engine.task(*id).await.unwrap());
    }
    out
}

async fn cancellation_reaches_the_handler(mode: Mode) {
    let e = env(mode, false).await;
    let w = start(
        Worker::new(e.client.clone())
            .lease_ttl(Duration::from_millis(300))
            .handle("k", |ctx: TaskContext, _: serde_json::Value| async move {
                ctx.cancelled().await;
                assert!(ctx.is_cancelled());
                HandlerResult::<()>::Err(TaskError::cancelled())
            }),
    );
    let id = e.client.enqueue(job("k", json!(null))).await.unwrap().id;
    wait_state(&e, id, TaskState::Running).await;
    e.client.cancel(id).await.unwrap();
    let t = wait_state(&e, id, TaskState::Cancelled).await;
    assert_eq!(t.attempts.last().unwrap().outcome, "cancelled");
    assert_eq!(w.stop().await.cancelled, 1);
}

async fn declared_schedules_are_synced_at_start(mode: Mode) {
    let e = env(mode, false).await;
    let def = |name: &str, spec: &str| -> ScheduleDef {
        serde_json::from_value(json!({"name": name, "spec": spec, "task": {"kind": "k"}})).unwrap()
    };
    e.client
        .schedule_put(def("adhoc", "0 * * * *"))
        .await
        .unwrap();
    let worker = |defs| {
        Worker::new(e.client.clone())
            .handle("k", |_c: TaskContext, _: serde_json::Value| async {
                HandlerResult::Ok(())
            })
            .schedules("billing", defs)
    };
    worker(vec![
        def("invoice", "0 2 * * *"),
        def("dunning", "0 3 * * *"),
    ])
    .run_for(Duration::from_millis(300), std::future::pending())
    .await
    .unwrap();
    worker(vec![def("invoice", "0 4 * * *")])
        .run_for(Duration::from_millis(300), std::future::pending())
        .await
        .unwrap();
    let all = e.client.schedules().await.unwrap();
    let names: Vec<(&str, &str, Option<&str>)> = all
        .iter()
        .map(|s| (s.name.as_str(), s.spec.as_str(), s.declared_by.as_deref()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("adhoc", "0 * * * *", None),
            ("invoice", "0 4 * * *", Some("billing"))
        ]
    );
    // Declaring a name twice is refused before anything changes.
    let err = worker(vec![def("x", "0 1 * * *"), def("x", "0 2 * * *")])
        .run(std::future::pending())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), sked_store::ErrorKind::Invalid);
    assert!(err.to_string().contains("\"x\" is given twice"), "{err}");
}

async fn run_for_stops_claiming_in_time(mode: Mode) {
    let e = env(mode, false).await;
    let tasks: Vec<NewTask> = (0..40).map(|_| job("k", json!(200))).collect();
    e.client.enqueue_many(tasks).await.unwrap();
    let started = Instant::now();
    let report = Worker::new(e.client.clone())
        .concurrency(4)
        .runtime_estimate(Duration::from_millis(100), 1.5)
        .handle("k", |_c: TaskContext, ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            HandlerResult::Ok(())
        })
        .run_for(Duration::from_millis(1500), std::future::pending())
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "ran {took:?}");
    assert!(report.succeeded >= 8, "{report:?}");
    let running = e
        .engine
        .tasks(TaskFilter::new().state(TaskState::Running).limit(100))
        .await
        .unwrap();
    assert!(running.is_empty(), "nothing is left running");
    let left = e
        .engine
        .tasks(TaskFilter::new().state(TaskState::Available).limit(100))
        .await
        .unwrap();
    assert_eq!(left.len() as u64, 40 - report.succeeded);
}

async fn each_queue_lane_keeps_its_own_concurrency(mode: Mode) {
    use std::collections::HashMap;
    let e = env(mode, false).await;
    // (running now, most at once) per queue.
    let seen: Arc<Mutex<HashMap<String, (usize, usize)>>> = Arc::default();
    let s = seen.clone();
    let w = start(
        Worker::new(e.client.clone())
            .queue("a", 1)
            .queue("b", 2)
            .handle("k", move |ctx: TaskContext, _: serde_json::Value| {
                let s = s.clone();
                async move {
                    let q = ctx.task().queue.clone();
                    {
                        let mut m = s.lock().unwrap();
                        let e = m.entry(q.clone()).or_default();
                        e.0 += 1;
                        e.1 = e.1.max(e.0);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    s.lock().unwrap().get_mut(&q).unwrap().0 -= 1;
                    HandlerResult::Ok(())
                }
            }),
    );
    let mut tasks = Vec::new();
    for (queue, n) in [("a", 3), ("b", 6), ("c", 1)] {
        for _ in 0..n {
            let mut t = job("k", json!(null));
            t.queue = queue.into();
            tasks.push(t);
        }
    }
    let ids: Vec<i64> = e
        .client
        .enqueue_many(tasks)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    for id in &ids[..9] {
        wait_state(&e, *id, TaskState::Succeeded).await;
    }
    let m = seen.lock().unwrap().clone();
    assert_eq!((m["a"].1, m["b"].1), (1, 2), "{m:?}");
    // A queue without a lane is not worked.
    assert_eq!(
        e.engine.task(ids[9]).await.unwrap().state,
        TaskState::Available
    );
    w.stop().await;
}

macro_rules! in_both_modes {
    ($($case:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Mode::Embedded).await;
                }
            )+
        }
        mod remote {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Mode::Remote).await;
                }
            )+
        }
    };
}

in_both_modes!(
    typed_handlers_get_their_payload,
    an_enqueue_inside_a_trace_carries_it_to_the_handler,
    a_timed_out_handler_is_stopped_and_retried,
    a_panicking_handler_fails_and_the_worker_goes_on,
    after_a_rescue_the_old_attempt_is_rejected,
    a_lost_lease_stops_the_handler,
    urgent_work_overtakes_a_full_prefetch_buffer,
    shutdown_finishes_in_flight_and_releases_the_rest,
    cancellation_reaches_the_handler,
    declared_schedules_are_synced_at_start,
    run_for_stops_claiming_in_time,
    each_queue_lane_keeps_its_own_concurrency,
);
