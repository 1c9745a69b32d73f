//! `sked server` and `sked worker`: long-running processes, each one [`sked::Node`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use sked::{EngineConfig, MaintenanceConfig, Node, NodeBuilder};

use crate::{CliError, CliResult, Global};

mod settings;

pub(crate) use settings::Common;
use settings::{Settings, duration, settings, std_duration};

/// The database a node works on when `--db` is not given.
const DEFAULT_DB: &str = "sqlite://sked.db";

#[derive(Args)]
pub(crate) struct ServerArgs {
    #[command(flatten)]
    common: Common,
    /// Address to listen on (port 0: one the system chooses, named in the log); anything but
    /// loopback requires --token
    #[arg(long, default_value = "127.0.0.1:7070", value_name = "HOST:PORT")]
    listen: String,
    /// Connections kept open at once; at the limit a new one closes the oldest idle one
    #[arg(long, default_value_t = 1024, value_name = "N")]
    max_connections: usize,
    /// How long a client may take to send a request's head (request line and headers)
    #[arg(long, default_value = "10s", value_name = "DUR")]
    header_timeout: String,
    /// The longest a worker's long-poll (a claim's wait) holds its request; keep it below the
    /// idle timeout of any proxy in front
    #[arg(long, default_value = "60s", value_name = "DUR")]
    max_wait: String,
    /// API tokens with names and scopes, instead of the one --token: a file of lines
    /// NAME:SCOPES:SECRET, scopes among admin, enqueue, work and read (comma-separated), the
    /// secret at least 16 characters; '#' starts a comment line
    #[arg(long, env = "SKED_TOKENS_FILE", value_name = "FILE")]
    tokens: Option<std::path::PathBuf>,
}

#[derive(Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    common: Common,
    /// Run at most this long (for workers started every minute by another scheduler): stop
    /// claiming when the next task would likely not finish in time, finish, exit 0
    #[arg(long, value_name = "DUR")]
    max_runtime: Option<String>,
    /// With --max-runtime: a task is expected to take the average run so far (the initial
    /// estimate before any) times this, from 1 to 1000 [default: 1.5]
    #[arg(long, value_name = "FACTOR")]
    tolerance: Option<String>,
    /// With --max-runtime: what a task is expected to take before any has run [default: 1s]
    #[arg(long, value_name = "DUR")]
    initial_estimate: Option<String>,
    /// How long running tasks may take to finish after SIGTERM before they are stopped and
    /// given back
    #[arg(long, default_value = "30s", value_name = "DUR")]
    shutdown_grace: String,
    /// Claimed tasks that may wait for a free slot [default: --concurrency]
    #[arg(long, value_name = "N")]
    prefetch: Option<usize>,
    /// Schedules this worker declares, kept in sync at start: a list of schedule definitions
    /// (the API's shape), in JSON or YAML
    #[arg(long, value_name = "FILE")]
    schedules: Option<std::path::PathBuf>,
    /// The group the declared schedules belong to; schedules the group no longer declares
    /// are removed
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

/// `--initial-estimate` and `--tolerance`, which only a worker with `--max-runtime` uses.
fn runtime_estimate(a: &WorkerArgs, bounded: bool) -> CliResult<Option<(Duration, f64)>> {
    if a.tolerance.is_none() && a.initial_estimate.is_none() {
        return Ok(None);
    }
    if !bounded {
        return Err(CliError::usage(
            "--tolerance and --initial-estimate apply only with --max-runtime",
        ));
    }
    let tolerance = match a.tolerance.as_deref() {
        None => 1.5,
        Some(t) => t
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite() && *t >= 1.0 && *t <= 1000.0)
            .ok_or_else(|| {
                CliError::usage(format!(
                    "invalid --tolerance {t:?}: a number from 1 to 1000 (1.5: half again the \
                     average run)"
                ))
            })?,
    };
    let initial = match a.initial_estimate.as_deref() {
        None => Duration::from_secs(1),
        Some(d) => std_duration(
            sked_core::parse_duration(d)
                .ok()
                .filter(|d| !d.is_negative())
                .ok_or_else(|| {
                    CliError::usage(format!(
                        "invalid --initial-estimate {d:?}: a duration such as 2s"
                    ))
                })?,
        ),
    };
    Ok(Some((initial, tolerance)))
}

/// A node on `--db` that takes part in maintenance, with the common flags applied.
fn node(c: &Common, s: &Settings) -> (NodeBuilder, String) {
    let mut maintenance = MaintenanceConfig::for_lease_ttl(s.lease_ttl);
    if let Some(r) = s.retention {
        maintenance = maintenance.retention(r);
    }
    let config = EngineConfig::with_lease_ttl(s.lease_ttl)
        .timeout_grace(s.timeout_grace)
        .telemetry(s.telemetry.clone());
    let id = config.node_id.clone();
    let mut node = Node::builder()
        .db(c.db.clone().unwrap_or_else(|| DEFAULT_DB.to_string()))
        .config(config)
        .maintenance(maintenance);
    if let Some(clock) = &s.clock {
        node = node.clock(clock.clone());
    }
    (node, id)
}

/// Starting failed: bad input (a malformed URL, say) is exit 2, the rest exit 1.
fn start_error(e: sked::Error) -> CliError {
    match e.kind() {
        sked::store::ErrorKind::Invalid => CliError::usage(e),
        _ => CliError::runtime(e),
    }
}

/// Listens for SIGINT and SIGTERM from now on and resolves when one arrives. Called before a
/// process starts its work: a signal that comes once the node beats or listens must stop it
/// gracefully, not kill it by the default action because nobody had asked for it yet.
fn signalled() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            match streams {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => std::future::pending().await,
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Refuses options that do not apply to a long-running process.
fn refuse_client_options(command: &str, g: &Global) -> CliResult {
    if g.server_on_command_line {
        return Err(CliError::usage(format!(
            "--server does not apply to `sked {command}`: it works on the database given by --db"
        )));
    }
    if g.json {
        return Err(CliError::usage(format!(
            "--json does not apply to `sked {command}`: it prints logs (use --log-json)"
        )));
    }
    Ok(())
}

/// A server's token: visible ASCII only, so that it cannot be blank, and a client sends in its
/// `Authorization` header exactly what the server compares.
fn check_token(token: &str) -> CliResult<String> {
    if token.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(token.to_string())
    } else {
        Err(CliError::usage(
            "invalid --token: use visible ASCII characters only, without spaces \
             (for example the output of `openssl rand -hex 32`)",
        ))
    }
}

pub(crate) async fn server(mut a: ServerArgs, g: &Global) -> CliResult {
    refuse_client_options("server", g)?;
    a.common.read_db_file()?;
    let addr: SocketAddr = a.listen.parse().map_err(|_| {
        CliError::usage(format!(
            "invalid --listen address {:?}: expected HOST:PORT like 127.0.0.1:7070",
            a.listen
        ))
    })?;
    let token = match g.token.as_deref() {
        None | Some("") => None,
        Some(t) => Some(check_token(t)?),
    };
    let tokens = match &a.tokens {
        None => None,
        Some(_) if token.is_some() => {
            return Err(CliError::usage(
                "--tokens and --token (or SKED_TOKEN) both given: put every token in the file",
            ));
        }
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| CliError::usage(format!("--tokens {}: {e}", file.display())))?;
            let tokens = sked_server::Tokens::parse(&text)
                .map_err(|e| CliError::usage(format!("--tokens {}: {e}", file.display())))?;
            Some(tokens)
        }
    };
    if !addr.ip().is_loopback() && token.is_none() && tokens.is_none() {
        return Err(CliError::usage(format!(
            "listening on {addr} (beyond loopback) requires an API token: pass --token or --tokens, or set SKED_TOKEN"
        )));
    }
    let limits = sked_server::Limits {
        max_connections: a.max_connections.max(1),
        header_read_timeout: duration("--header-timeout", &a.header_timeout)?
            .try_into()
            .map_err(|_| CliError::usage("invalid --header-timeout"))?,
        max_wait: duration("--max-wait", &a.max_wait)?
            .try_into()
            .map_err(|_| CliError::usage("invalid --max-wait"))?,
    };
    let mut s = settings(&a.common)?;
    let otel = s.otel.take();
    init_logs(a.common.log_json);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::runtime(format!("cannot listen on {addr}: {e}")))?;
    // The address bound, which names the port the system chose for `--listen HOST:0`.
    let addr = listener.local_addr().unwrap_or(addr);
    let (node, node_id) = node(&a.common, &s);
    let mut http = sked_server::HttpService::new(listener, token).limits(limits);
    if let Some(tokens) = tokens {
        http = http.tokens(tokens);
    }
    let mut node = node.service(http);
    if !s.executors.is_empty() {
        let (executors, concurrency, queues) =
            (s.executors, a.common.concurrency, a.common.queues.clone());
        node = node.worker(move |w| {
            let id = format!("{node_id}-exec");
            executors
                .into_iter()
                .fold(w.id(id).concurrency(concurrency).queues(queues), |w, e| {
                    w.executor(e)
                })
        });
    }
    let stop = signalled();
    let node = node.start().await.map_err(start_error)?;
    let engine = node.engine();
    tracing::info!(%addr, db = %sked::redacted_url(a.common.db.as_deref().unwrap_or(DEFAULT_DB)), node = %engine.config().node_id, "sked server listening");
    node.run_until(async {
        stop.await;
        tracing::info!("shutting down");
    })
    .await
    .map_err(CliError::runtime)?;
    if let Some(otel) = otel {
        otel.shutdown().await;
    }
    Ok(())
}

/// `sked worker`: on the database (`--db`, a node that also takes part in maintenance), or
/// through a server (`--server` or `SKED_URL`).
pub(crate) async fn worker(mut a: WorkerArgs, g: &Global) -> CliResult {
    a.common.read_db_file()?;
    if g.json {
        return Err(CliError::usage(
            "--json does not apply to `sked worker`: it prints logs (use --log-json)",
        ));
    }
    let mut s = settings(&a.common)?;
    let otel = s.otel.take();
    if s.executors.is_empty() {
        return Err(CliError::usage(
            "a worker needs something to run: pass --exec shell,http",
        ));
    }
    let remote = g.server.clone();
    if let Some(url) = &remote {
        let from = if g.server_on_command_line {
            "--server"
        } else {
            "SKED_URL"
        };
        if a.common.db.is_some() {
            return Err(CliError::usage(format!(
                "--db and {from} ({url}) both given: a worker works either on the database \
                 (--db) or through a server ({from}), not both"
            )));
        }
        if a.common.retention.is_some() {
            return Err(CliError::usage(format!(
                "--retention does not apply to a worker that works through a server ({from}): \
                 the server prunes"
            )));
        }
    }
    let max_runtime = a
        .max_runtime
        .as_deref()
        .map(|m| duration("--max-runtime", m))
        .transpose()?;
    let estimate = runtime_estimate(&a, max_runtime.is_some())?;
    let grace = sked_core::parse_duration(&a.shutdown_grace)
        .map_err(|e| CliError::usage(format!("invalid --shutdown-grace: {e}")))?;
    let declared = a
        .schedules
        .as_deref()
        .map(|p| crate::schedule_file::read("--schedules", p))
        .transpose()?;
    sked_core::validate_name("--schedule-group", &a.schedule_group)
        .map_err(|e| CliError::usage(e.message().to_string()))?;
    let (concurrency, queues, prefetch) =
        (a.common.concurrency, a.common.queues.clone(), a.prefetch);
    let lease_ttl = s.lease_ttl;
    let group = a.schedule_group.clone();
    let executors = s.executors.clone();
    let setup = move |w: sked::worker::Worker| {
        let mut w = w
            .concurrency(concurrency)
            .queues(queues)
            .lease_ttl(std_duration(lease_ttl))
            .shutdown_grace(std_duration(grace));
        if let Some(p) = prefetch {
            w = w.prefetch(p);
        }
        if let Some((initial, tolerance)) = estimate {
            w = w.runtime_estimate(initial, tolerance);
        }
        for e in executors {
            w = w.executor(e);
        }
        if let Some(defs) = declared {
            w = w.schedules(group, defs);
        }
        w
    };
    let stop = signalled();
    let report = match remote {
        Some(url) => {
            let client = sked::Client::remote_with(sked::client::RemoteOptions {
                token: g.token.clone(),
                ..sked::client::RemoteOptions::new(&url)
            })
            .map_err(CliError::usage)?;
            init_logs(a.common.log_json);
            let worker = setup(sked::worker::Worker::new(client).telemetry(s.telemetry.clone()));
            match max_runtime {
                Some(m) => worker.run_for(std_duration(m), stop).await,
                None => worker.run(stop).await,
            }
            .map(Some)
        }
        None => {
            let mut node = node(&a.common, &s).0.worker(setup);
            if let Some(m) = max_runtime {
                node = node.worker_runtime(std_duration(m));
            }
            // Before the start: the worker it starts may log at once (its schedules synced).
            init_logs(a.common.log_json);
            let node = node.start().await.map_err(start_error)?;
            node.run_until(stop).await
        }
    };
    if let Some(otel) = otel {
        otel.shutdown().await;
    }
    report.map_err(start_error)?;
    Ok(())
}
