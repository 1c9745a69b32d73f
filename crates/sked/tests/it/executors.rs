//! The built-in executors run directly: what `http` sends and how it ends, where it may
//! connect, how much of an answer it reads; how `shell` keeps output and ends a stopped
//! command's whole process group.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sked::executors::{ExecResult, Executor, HttpExecutor, HttpPolicy, ShellExecutor};
use sked_core::{Task, TaskState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn task(kind: &str, payload: Value) -> Task {
    Task {
        id: 7,
        queue: "default".into(),
        kind: kind.into(),
        payload,
        priority: 0,
        state: TaskState::Running,
        run_at: jiff::Timestamp::UNIX_EPOCH,
        attempt: 1,
        max_attempts: 3,
        timeout: None,
        unique_key: None,
        backoff: None,
        expires_at: None,
        schedule: None,
        nominal_at: None,
        created_at: jiff::Timestamp::UNIX_EPOCH,
        started_at: None,
        finished_at: None,
        lease_expires_at: None,
        worker: None,
        cancel_requested: false,
        last_error: None,
        result: None,
        key: None,
        traceparent: None,
        depends_on: vec![],
        waiting_for: vec![],
        dependents: vec![],
        workflow: None,
        batch: None,
        on_parent_failure: sked::ParentFailure::Cancel,
        progress: None,
        attempts: vec![],
    }
}

fn loopback() -> HttpExecutor {
    HttpExecutor::with_policy(HttpPolicy::allow_only("127.0.0.0/8").unwrap())
}

/// A server on `ip` that answers each request with `answer(request)` (raw HTTP) and reports
/// each request it was sent.
async fn http_server(
    ip: &str,
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let answer = std::sync::Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (tx, answer) = (tx.clone(), answer.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let _ = sock.write_all(answer(&req).as_bytes()).await;
                let _ = tx.send(req);
            });
        }
    });
    (addr, rx)
}

fn answer(status: u16, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
        body.len()
    )
}

fn failure(r: ExecResult) -> (String, bool) {
    match r {
        ExecResult::Failure { error, retryable } => (error, retryable),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn http_succeeds_on_2xx_and_retries_5xx() {
    let exec = loopback();
    let (ok, mut seen) = http_server("127.0.0.1", |_| answer(200, "", "pong")).await;
    let got = exec
        .run(&task("http", json!({"method": "post", "url": format!("http://{ok}/hook"), "headers": {"x-a": "1"}, "body": {"n": 1}})))
        .await;
    assert_eq!(
        got,
        ExecResult::Success(Some(json!({"status": 200, "body": "pong"})))
    );
    let req = seen.recv().await.unwrap();
    assert!(req.starts_with("POST /hook HTTP/1.1"), "{req}");
    assert!(
        req.contains("x-a: 1") && req.contains("sked-task-id: 7") && req.ends_with(r#"{"n":1}"#),
        "{req}"
    );

    // The task's trace context goes along, unless the payload gives its own.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = task("http", json!({"url": format!("http://{ok}/traced")}));
    traced.traceparent = Some(tp.into());
    exec.run(&traced).await;
    let req = seen.recv().await.unwrap();
    assert!(req.contains(&format!("traceparent: {tp}")), "{req}");
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    traced.payload = json!({"url": format!("http://{ok}/own"), "headers": {"TraceParent": own}});
    exec.run(&traced).await;
    let req = seen.recv().await.unwrap().to_ascii_lowercase();
    assert_eq!(req.matches("traceparent:").count(), 1, "{req}");
    assert!(req.contains(own), "{req}");

    let (bad, _) = http_server("127.0.0.1", |_| answer(503, "", "busy")).await;
    let (error, retryable) = failure(
        exec.run(&task("http", json!({"url": format!("http://{bad}")})))
            .await,
    );
    assert!(retryable);
    assert!(error.starts_with("HTTP 503"), "{error}");
    let (gone, _) = http_server("127.0.0.1", |_| answer(404, "", "")).await;
    let (_, retryable) = failure(
        exec.run(&task("http", json!({"url": format!("http://{gone}")})))
            .await,
    );
    assert!(!retryable);
    let (_, retryable) = failure(exec.run(&task("http", json!({"nope": 1}))).await);
    assert!(!retryable);
    let (error, retryable) = failure(
        exec.run(&task("http", json!({"url": "file:///etc/passwd"})))
            .await,
    );
    assert!(!retryable && error.contains("scheme"), "{error}");
}

/// By default a task cannot reach this machine (the scheduler's own API, say) or link-local
/// addresses, whether the URL names the address or a name that resolves to it; nothing is sent.
#[tokio::test(flavor = "multi_thread")]
async fn http_refuses_loopback_unless_allowed() {
    let (api, mut seen) = http_server("127.0.0.1", |_| answer(200, "", "paused")).await;
    let exec = HttpExecutor::new();
    for url in [
        format!("http://{api}/v1/queues/default/pause"),
        format!("http://localhost:{}/v1/queues/default/pause", api.port()),
        format!("http://[::ffff:127.0.0.1]:{}/", api.port()),
        "http://169.254.169.254/latest/meta-data/".to_string(),
    ] {
        let (error, retryable) = failure(
            exec.run(&task("http", json!({"method": "POST", "url": url})))
                .await,
        );
        assert!(!retryable, "{url}: {error}");
        assert!(error.contains("refused"), "{url}: {error}");
    }
    let other = HttpExecutor::with_policy(HttpPolicy::allow_only("10.0.0.0/8").unwrap());
    let (error, _) = failure(
        other
            .run(&task("http", json!({"url": format!("http://{api}/")})))
            .await,
    );
    assert!(error.contains("not in --http-allow"), "{error}");
    assert!(
        seen.try_recv().is_err(),
        "a refused request reached the server"
    );
    // Allowed, it goes through.
    assert!(matches!(
        loopback()
            .run(&task("http", json!({"url": format!("http://{api}/")})))
            .await,
        ExecResult::Success(_)
    ));
}

/// Redirects are answers, not followed, unless the task asks; a followed redirect is checked
/// against the policy like the first request.
#[tokio::test(flavor = "multi_thread")]
async fn http_follows_redirects_only_when_asked_and_only_where_allowed() {
    let (inside, mut seen_inside) = http_server("127.0.0.1", |_| answer(200, "", "secret")).await;
    let (allowed, _) = http_server("127.0.0.2", |_| answer(200, "", "fine")).await;
    let to_inside = format!("location: http://{inside}/\r\n");
    let (front, _) = http_server("127.0.0.2", move |req: &str| {
        if req.starts_with("GET /ok") {
            answer(302, &format!("location: http://{allowed}/\r\n"), "")
        } else {
            answer(302, &to_inside, "")
        }
    })
    .await;
    let exec = HttpExecutor::with_policy(HttpPolicy::allow_only("127.0.0.2").unwrap());
    let (error, retryable) = failure(
        exec.run(&task("http", json!({"url": format!("http://{front}/")})))
            .await,
    );
    assert!(error.starts_with("HTTP 302"), "{error}");
    assert!(!retryable);
    let (error, retryable) = failure(
        exec.run(&task(
            "http",
            json!({"url": format!("http://{front}/"), "follow_redirects": true}),
        ))
        .await,
    );
    assert!(error.contains("refused") && !retryable, "{error}");
    assert!(
        seen_inside.try_recv().is_err(),
        "the redirect reached a refused address"
    );
    let got = exec
        .run(&task(
            "http",
            json!({"url": format!("http://{front}/ok"), "follow_redirects": true}),
        ))
        .await;
    assert_eq!(
        got,
        ExecResult::Success(Some(json!({"status": 200, "body": "fine"})))
    );
}

/// A server that accepts connections and never answers.
async fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    addr
}

/// A request that gets no answer ends at the task's timeout, or at the executor's default when
/// the task has none, and may be retried.
#[tokio::test(flavor = "multi_thread")]
async fn http_without_an_answer_ends_at_the_timeout() {
    let silent = silent_server().await;
    let exec = loopback().default_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let (error, retryable) = failure(
        exec.run(&task("http", json!({"url": format!("http://{silent}/")})))
            .await,
    );
    let took = started.elapsed();
    assert!(retryable && error.contains("timed out"), "{error}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );

    let mut t = task("http", json!({"url": format!("http://{silent}/")}));
    t.timeout = Some(jiff::SignedDuration::from_millis(200));
    let started = Instant::now();
    let (error, _) = failure(loopback().run(&t).await);
    assert!(error.contains("timed out"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Only the head of a large answer is read and kept; the rest is not downloaded.
#[tokio::test(flavor = "multi_thread")]
async fn http_keeps_only_the_head_of_a_large_answer() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = sock.read(&mut buf).await;
        let total: usize = 1 << 30;
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n");
        sock.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b'x'; 64 * 1024];
        while counter.load(std::sync::atomic::Ordering::Relaxed) < total {
            if sock.write_all(&chunk).await.is_err() {
                return;
            }
            counter.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
        }
    });
    let got = loopback()
        .run(&task("http", json!({"url": format!("http://{addr}/")})))
        .await;
    let ExecResult::Success(Some(result)) = got else {
        panic!("{got:?}")
    };
    assert_eq!(result["body"].as_str().unwrap().len(), 4096);
    assert_eq!(result["truncated"], true);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 64 << 20, "{sent} bytes sent of a 1 GiB answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn shell_keeps_the_tail_of_its_output() {
    let got = ShellExecutor
        .run(&task(
            "shell",
            json!({"command": "seq 1 200000; echo err-end >&2"}),
        ))
        .await;
    let ExecResult::Success(Some(result)) = got else {
        panic!("{got:?}")
    };
    let out = result["stdout"].as_str().unwrap();
    assert_eq!(out.len(), 4096);
    assert!(out.ends_with("199999\n200000\n"), "{out}");
    assert_eq!(result["stderr"], "err-end\n");
    assert_eq!(result["exit_code"], 0);
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: it only waits for its parent to read its status.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// A command stopped mid-way (its future dropped, as on a timeout, a cancel or shutdown) takes
/// its children with it, a child that ignores SIGTERM too.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_command_ends_its_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let command = format!(
        "sleep 300 & echo $! >> {p}; (trap '' TERM; sleep 300) & echo $! >> {p}; sleep 300",
        p = pids.display()
    );
    let t = task("shell", json!({ "command": command }));
    let run = ShellExecutor.run(&t);
    let stopped = tokio::time::timeout(Duration::from_millis(500), run).await;
    assert!(stopped.is_err(), "the command ended by itself");
    let pids: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let started = Instant::now();
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            started.elapsed() < sked::executors::KILL_GRACE + Duration::from_secs(2),
            "children still alive: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("process group gone {:?} after the stop", started.elapsed());
}
