//! The accept loop: HTTP/1 connections served by hyper with a time limit on reading each
//! request's head, and a bound on open connections that sheds idle ones first.
//!
//! A client that opens connections and sends nothing (or half a request line) must not hold
//! the server's file descriptors: its connection is closed when the head has not arrived
//! within [`Limits::header_read_timeout`], and sooner when the server needs room. At
//! [`Limits::max_connections`], or when the process is out of file descriptors, a new
//! connection closes the oldest one that has no request in flight (a half-sent head, or an
//! idle keep-alive); a request being answered (a long-polling claim, say) is never cut off,
//! and when every connection has one, the new connection is refused instead.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tower::ServiceExt;

/// Bounds on the connections a server keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; at the limit the oldest idle one is closed for a new one.
    pub max_connections: usize,
    /// How long a client may take to send a request's head (the request line and headers).
    pub header_read_timeout: Duration,
    /// The longest a long-poll (a claim's `wait`, `GET /v1/work`) holds its request: keep it
    /// below the idle timeout of any proxy in front.
    pub max_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            max_wait: Duration::from_secs(60),
        }
    }
}

/// One open connection: requests in flight, and how to close it.
struct Open {
    busy: Arc<AtomicUsize>,
    abort: Option<AbortHandle>,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Registry {
    next: u64,
    open: BTreeMap<u64, Open>,
}

impl Registry {
    /// Closes the oldest connection with no request in flight; whether there was one.
    fn shed_idle(&mut self) -> bool {
        let idle = self
            .open
            .iter()
            .find(|(_, c)| c.busy.load(Ordering::Acquire) == 0 && c.abort.is_some())
            .map(|(&id, _)| id);
        match idle.and_then(|id| self.open.remove(&id)) {
            Some(c) => {
                c.abort.expect("checked above").abort();
                true
            }
            None => false,
        }
    }
}

type Shared = Arc<Mutex<Registry>>;

fn lock(r: &Shared) -> std::sync::MutexGuard<'_, Registry> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes its connection from the registry when the connection's task ends or is aborted.
struct Registered(Shared, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.0).open.remove(&self.1);
    }
}

/// Counts a request in flight on its connection while it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::AcqRel);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets the
/// requests in flight end (kept-alive connections close after their current request).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let registry: Shared = Arc::default();
    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, most likely: make room, or wait for some.
                    if !lock(&registry).shed_idle() {
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
        };
        let (id, busy) = {
            let mut r = lock(&registry);
            if r.open.len() >= limits.max_connections && !r.shed_idle() {
                // Every connection is answering a request: this one waits its turn elsewhere.
                continue;
            }
            let id = r.next;
            r.next += 1;
            let busy = Arc::new(AtomicUsize::new(0));
            r.open.insert(
                id,
                Open {
                    busy: busy.clone(),
                    abort: None,
                },
            );
            (id, busy)
        };
        let registered = Registered(registry.clone(), id);
        let connection = connection(stream, app.clone(), busy, limits, stopped.clone());
        let abort = tasks.spawn(async move {
            let _registered = registered;
            connection.await;
        });
        if let Some(open) = lock(&registry).open.get_mut(&id) {
            open.abort = Some(abort);
        }
    }
    drop(listener);
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
}

/// One connection, until the client closes it, its head times out, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    busy: Arc<AtomicUsize>,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let in_flight = InFlight::enter(&busy);
        let app = app.clone();
        async move {
            let response = app.oneshot(req.map(axum::body::Body::new)).await;
            drop(in_flight);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = async { stopped.wait_for(|s| *s).await.is_ok() } => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
