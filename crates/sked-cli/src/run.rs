//! `sked server` and `sked worker`: long-running processes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use sked::worker::Worker;
use sked::{Engine, EngineConfig, MaintenanceConfig};
use tokio::sync::watch;

use crate::{CliError, CliResult};

#[derive(Args)]
pub(crate) struct Common {
    /// Database: sqlite://PATH (created if missing), or postgres://USER@HOST:PORT/DB shared
    /// by every node.
    #[arg(long, env = "SKED_DB", default_value = "sqlite://sked.db")]
    db: String,
    /// Built-in executors to run in this process (comma-separated: shell, http).
    #[arg(long, value_name = "LIST")]
    exec: Option<String>,
    /// Tasks run at once by this process's executors.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Queues this process's executors work (comma-separated; all when absent).
    #[arg(long, value_delimiter = ',')]
    queues: Vec<String>,
    /// Lease of a claimed task without a heartbeat; the leader lease is this too, at most 15s.
    #[arg(long, default_value = "30s")]
    lease_ttl: String,
    /// Log as JSON lines instead of text (env SKED_LOG_JSON=1).
    #[arg(long, env = "SKED_LOG_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    log_json: bool,
    /// Pretend this node's clock is off by this much (tests of clock skew), like -1m or 45s.
    #[arg(long, env = "SKED_CLOCK_SKEW", hide = true, allow_hyphen_values = true)]
    clock_skew: Option<String>,
}

#[derive(Args)]
pub(crate) struct ServerArgs {
    #[command(flatten)]
    common: Common,
    /// Address to listen on. Anything but loopback requires --token.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// API token required in `Authorization: Bearer` (env SKED_TOKEN).
    #[arg(long, env = "SKED_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How long finished tasks are kept.
    #[arg(long, default_value = "7d")]
    retention: String,
}

#[derive(Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    common: Common,
    /// Work for a sked server over HTTP (remote mode) instead of opening --db.
    #[arg(long, env = "SKED_SERVER", value_name = "URL")]
    server: Option<String>,
    /// API token for --server (env SKED_TOKEN).
    #[arg(long, env = "SKED_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Run at most this long (for workers started every minute by another scheduler): stop
    /// claiming when the next task would likely not finish in time, finish, exit 0.
    #[arg(long, value_name = "DUR")]
    max_runtime: Option<String>,
    /// How long running tasks may take to finish after SIGTERM before they are stopped and
    /// given back.
    #[arg(long, default_value = "30s", value_name = "DUR")]
    shutdown_grace: String,
    /// Claimed tasks that may wait for a free slot (default: --concurrency).
    #[arg(long, value_name = "N")]
    prefetch: Option<usize>,
    /// Schedules this worker declares, kept in sync at start: a JSON array of schedule
    /// definitions (the API's shape).
    #[arg(long, value_name = "FILE")]
    schedules: Option<std::path::PathBuf>,
    /// The group the declared schedules belong to; schedules the group no longer declares
    /// are removed.
    #[arg(long, default_value = "sked-worker", value_name = "NAME")]
    schedule_group: String,
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn duration(flag: &str, v: &str) -> CliResult<jiff::SignedDuration> {
    let d = sked_core::parse_duration(v)
        .map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))?;
    if d < jiff::SignedDuration::from_secs(1) {
        return Err(CliError::usage(format!("{flag} must be at least 1s")));
    }
    Ok(d)
}

/// A clock that is off by a fixed amount: a stand-in for a badly set machine clock.
#[derive(Debug)]
struct SkewedClock(jiff::SignedDuration);

impl sked_core::Clock for SkewedClock {
    fn now(&self) -> jiff::Timestamp {
        let now = jiff::Timestamp::now();
        now.checked_add(self.0).unwrap_or(now)
    }
}

type Executors = Vec<Arc<dyn sked::executors::Executor>>;

/// Checks the common flags and builds the engine's settings and the executors, before any
/// connection is made (so bad flags fail fast with exit code 2).
fn settings(
    c: &Common,
    retention: Option<&str>,
) -> CliResult<(EngineConfig, MaintenanceConfig, Executors)> {
    let lease_ttl = duration("--lease-ttl", &c.lease_ttl)?;
    let executors =
        sked::executors::builtin(c.exec.as_deref().unwrap_or("")).map_err(CliError::usage)?;
    if c.concurrency == 0 {
        return Err(CliError::usage("--concurrency must be at least 1"));
    }
    let config = EngineConfig::with_lease_ttl(lease_ttl);
    let mut maintenance = MaintenanceConfig::for_lease_ttl(lease_ttl);
    if let Some(r) = retention {
        maintenance = maintenance.retention(duration("--retention", r)?);
    }
    Ok((config, maintenance, executors))
}

/// Opens the store and builds the engine and the executors from the common flags.
async fn setup(
    c: &Common,
    retention: Option<&str>,
) -> CliResult<(Engine, MaintenanceConfig, Executors)> {
    let (config, maintenance, executors) = settings(c, retention)?;
    let local: Arc<dyn sked_core::Clock> = match &c.clock_skew {
        None => Arc::new(sked_core::SystemClock),
        Some(skew) => {
            let (sign, magnitude) = match skew.strip_prefix('-') {
                Some(rest) => (-1, rest),
                None => (1, skew.as_str()),
            };
            let skew = sked_core::parse_duration(magnitude)
                .map_err(|e| CliError::usage(format!("invalid --clock-skew: {e}")))?;
            Arc::new(SkewedClock(skew * sign))
        }
    };
    let store = sked::open_store(&c.db).await.map_err(|e| match e.kind() {
        sked::store::ErrorKind::Invalid => CliError::usage(e),
        _ => CliError::runtime(e),
    })?;
    let clock = sked::node_clock(&store, local)
        .await
        .map_err(CliError::runtime)?;
    Ok((
        Engine::with_clock(store, clock, config),
        maintenance,
        executors,
    ))
}

fn spawn_worker(
    engine: &Engine,
    c: &Common,
    executors: Vec<Arc<dyn sked::executors::Executor>>,
    mut shutdown: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if executors.is_empty() {
        return None;
    }
    let mut worker = Worker::new(engine.clone())
        .id(format!("{}-exec", engine.config().node_id))
        .concurrency(c.concurrency)
        .queues(c.queues.clone());
    for e in executors {
        worker = worker.executor(e);
    }
    Some(tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        if let Err(e) = worker.run(stop).await {
            tracing::error!(error = %e, "the worker stopped");
        }
    }))
}

/// Resolves when SIGINT or SIGTERM arrives.
async fn signalled() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub(crate) async fn server(a: ServerArgs) -> CliResult {
    let addr: SocketAddr = a.listen.parse().map_err(|_| {
        CliError::usage(format!(
            "invalid --listen address {:?}: expected HOST:PORT like 127.0.0.1:7070",
            a.listen
        ))
    })?;
    let token = a.token.filter(|t| !t.is_empty());
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(CliError::usage(format!(
            "listening on {addr} (beyond loopback) requires an API token: pass --token or set SKED_TOKEN"
        )));
    }
    init_logs(a.common.log_json);
    let (engine, maintenance, executors) = setup(&a.common, Some(&a.retention)).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::runtime(format!("cannot listen on {addr}: {e}")))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let maintenance = tokio::spawn(sked::maintenance::run(
        engine.clone(),
        maintenance,
        stop_rx.clone(),
    ));
    let worker = spawn_worker(&engine, &a.common, executors, stop_rx.clone());
    let app = sked_server::router(sked_server::AppState {
        engine: engine.clone(),
        token: token.map(Arc::from),
    });
    tracing::info!(%addr, db = %a.common.db, node = %engine.config().node_id, "sked server listening");
    let mut http_stop = stop_rx.clone();
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = http_stop.wait_for(|s| *s).await;
    });
    let server = tokio::spawn(async move { serve.await });
    signalled().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    if let Some(w) = worker {
        let _ = w.await;
    }
    let _ = maintenance.await;
    // Long-polling claims may hold connections open; do not wait for them forever.
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Ok(())
}

/// Reads `--schedules FILE`: a JSON array of schedule definitions, each checked.
fn declared_schedules(path: &std::path::Path) -> CliResult<Vec<sked_core::ScheduleDef>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::usage(format!("cannot read --schedules {}: {e}", path.display())))?;
    let defs: Vec<sked_core::ScheduleDef> = serde_json::from_str(&text).map_err(|e| {
        CliError::usage(format!(
            "invalid --schedules {}: {e} (expected a JSON array of schedules)",
            path.display()
        ))
    })?;
    for d in &defs {
        d.validate().map_err(|e| {
            CliError::usage(format!(
                "invalid --schedules {}: schedule {:?}: {}",
                path.display(),
                d.name,
                e.message()
            ))
        })?;
    }
    Ok(defs)
}

pub(crate) async fn worker(a: WorkerArgs) -> CliResult {
    let (config, _, executors) = settings(&a.common, None)?;
    if executors.is_empty() {
        return Err(CliError::usage(
            "a worker needs something to run: pass --exec shell,http",
        ));
    }
    let max_runtime = a
        .max_runtime
        .as_deref()
        .map(|m| duration("--max-runtime", m))
        .transpose()?;
    let grace = sked_core::parse_duration(&a.shutdown_grace)
        .map_err(|e| CliError::usage(format!("invalid --shutdown-grace: {e}")))?;
    let declared = a.schedules.as_deref().map(declared_schedules).transpose()?;
    sked_core::validate_name("--schedule-group", &a.schedule_group)
        .map_err(|e| CliError::usage(e.message().to_string()))?;
    let client = match &a.server {
        Some(url) => sked::Client::remote_with(sked::client::RemoteOptions {
            token: a.token.clone(),
            ..sked::client::RemoteOptions::new(url)
        })
        .map_err(CliError::usage)?,
        None => sked::Client::embedded(setup(&a.common, None).await?.0),
    };
    init_logs(a.common.log_json);
    let mut worker = Worker::new(client)
        .concurrency(a.common.concurrency)
        .queues(a.common.queues.clone())
        .lease_ttl(
            std::time::Duration::try_from(config.lease_ttl).unwrap_or(Duration::from_secs(30)),
        )
        .shutdown_grace(std::time::Duration::try_from(grace).unwrap_or_default());
    if let Some(p) = a.prefetch {
        worker = worker.prefetch(p);
    }
    for e in executors {
        worker = worker.executor(e);
    }
    if let Some(defs) = declared {
        worker = worker.schedules(a.schedule_group.clone(), defs);
    }
    let run = match max_runtime {
        Some(m) => {
            worker
                .run_for(
                    std::time::Duration::try_from(m).unwrap_or_default(),
                    signalled(),
                )
                .await
        }
        None => worker.run(signalled()).await,
    };
    run.map_err(|e| match e.kind() {
        sked::store::ErrorKind::Invalid => CliError::usage(e),
        _ => CliError::runtime(e),
    })?;
    Ok(())
}
