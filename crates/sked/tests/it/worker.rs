//! The worker pool with the real `shell` executor: timeouts stop the process, cancellation
//! reaches a running task through its heartbeat, and shutdown lets in-flight work finish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use serde_json::json;
use sked::executors::ShellExecutor;
use sked::worker::Worker;
use sked::{Engine, EngineConfig};
use sked_core::{NewTask, TaskState};
use tokio::sync::watch;

fn engine(dir: &tempfile::TempDir) -> Engine {
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    // A short lease makes heartbeats (a third of it) frequent.
    let config = EngineConfig::with_lease_ttl(SignedDuration::from_millis(300));
    Engine::new(store, config)
}

fn start(engine: &Engine) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = watch::channel(false);
    let worker = Worker::new(engine.clone())
        .id("w")
        .shutdown_grace(Duration::from_secs(10))
        .executor(Arc::new(ShellExecutor));
    let run = worker.run(async move {
        let _ = rx.wait_for(|s| *s).await;
    });
    (
        tx,
        tokio::spawn(async move {
            run.await.unwrap();
        }),
    )
}

async fn wait_state(engine: &Engine, id: i64, want: TaskState) -> sked_core::Task {
    let start = Instant::now();
    loop {
        let t = engine.task(id).await.unwrap();
        if t.state == want {
            return t;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "task {id} is {} not {want}",
            t.state
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn shell(cmd: &str) -> NewTask {
    let mut t = NewTask::new("shell");
    t.payload = json!({"command": cmd});
    t
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_task_is_stopped_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let (stop, worker) = start(&e);
    let marker = dir.path().join("survived");
    let pid_file = dir.path().join("pid");
    let mut t = shell(&format!(
        "echo $$ > {}; sleep 3; touch {}",
        pid_file.display(),
        marker.display()
    ));
    t.timeout = Some(SignedDuration::from_millis(300));
    t.max_attempts = 1;
    let id = e.enqueue(t).await.unwrap().id;
    let dead = wait_state(&e, id, TaskState::Dead).await;
    assert!(dead.last_error.unwrap().contains("timed out after 300ms"));
    // The shell was killed: once it is gone, nothing is left to touch the file.
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let status = format!("/proc/{}/status", pid.trim());
    let start = Instant::now();
    while std::fs::read_to_string(&status).is_ok_and(|s| !s.contains("State:\tZ")) {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the command kept running after its timeout"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!marker.exists(), "the command ran on after its timeout");
    stop.send(true).unwrap();
    worker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_running_task_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let (stop, worker) = start(&e);
    let id = e.enqueue(shell("sleep 30")).await.unwrap().id;
    wait_state(&e, id, TaskState::Running).await;
    let t = e.cancel(id).await.unwrap();
    assert!(t.cancel_requested);
    // `sleep 30` outlasts the wait for the state: reaching it means the command was stopped.
    wait_state(&e, id, TaskState::Cancelled).await;
    stop.send(true).unwrap();
    worker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_lets_in_flight_tasks_finish() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let (stop, worker) = start(&e);
    // `running` in the store also covers a claimed task still in the prefetch buffer, which
    // shutdown gives back: wait until the command itself has started.
    let started = dir.path().join("started");
    let cmd = format!("touch {}; sleep 0.5; echo done", started.display());
    let id = e.enqueue(shell(&cmd)).await.unwrap().id;
    let since = Instant::now();
    while !started.exists() {
        assert!(since.elapsed() < Duration::from_secs(15), "never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.send(true).unwrap();
    worker.await.unwrap();
    let t = e.task(id).await.unwrap();
    assert_eq!(t.state, TaskState::Succeeded);
    assert_eq!(t.result.unwrap()["stdout"], "done\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_command_is_retried_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let (stop, worker) = start(&e);
    let mut t = shell("echo oops >&2; exit 3");
    t.max_attempts = 1;
    let id = e.enqueue(t).await.unwrap().id;
    let dead = wait_state(&e, id, TaskState::Dead).await;
    assert_eq!(dead.last_error.as_deref(), Some("exit code 3: oops"));
    stop.send(true).unwrap();
    worker.await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_reports_its_progress_and_the_task_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir);
    let (go_on, go) = watch::channel(false);
    let (stop, mut stopped) = watch::channel(false);
    let worker = Worker::new(e.clone()).id("w").handle(
        "report",
        move |ctx: sked::worker::TaskContext, _: serde_json::Value| {
            let mut go = go.clone();
            async move {
                assert!(ctx.progress(json!("half")).is_err(), "not a progress");
                ctx.progress(json!({"percent": 40, "step": "upload"}))
                    .unwrap();
                let _ = go.wait_for(|g| *g).await;
                ctx.progress(json!(100)).unwrap();
                Ok(())
            }
        },
    );
    let run = tokio::spawn(worker.run(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    let id = e.enqueue(NewTask::new("report")).await.unwrap().id;
    let start = Instant::now();
    loop {
        let t = e.task(id).await.unwrap();
        if t.progress == Some(json!({"percent": 40, "step": "upload"})) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no progress: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    go_on.send(true).unwrap();
    let done = wait_state(&e, id, TaskState::Succeeded).await;
    // The last report goes with the next heartbeat, if one comes before the end.
    assert!(
        [json!({"percent": 40, "step": "upload"}), json!(100)]
            .contains(done.progress.as_ref().unwrap()),
        "{:?}",
        done.progress
    );
    stop.send(true).unwrap();
    run.await.unwrap().unwrap();
}
