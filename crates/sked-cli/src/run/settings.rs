//! The flags `sked server` and `sked worker` share, and what they say once checked.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use jiff::SignedDuration;
use sked::executors::Executor;

use crate::{CliError, CliResult};

#[derive(Args)]
pub(crate) struct Common {
    /// Database: sqlite://PATH (created if missing), or postgres://USER@HOST:PORT/DB shared
    /// by every node [default: sqlite://sked.db]
    #[arg(long, env = "SKED_DB")]
    pub(super) db: Option<String>,
    /// File holding the database URL, instead of --db: a password in it stays out of the
    /// process list and the environment; one trailing newline is ignored
    #[arg(long, env = "SKED_DB_FILE", value_name = "PATH", conflicts_with = "db")]
    pub(super) db_file: Option<std::path::PathBuf>,
    /// Built-in executors to run in this process (comma-separated: shell, http)
    #[arg(long, value_name = "LIST")]
    pub(super) exec: Option<String>,
    /// Networks the http executor may connect to (comma-separated CIDR blocks or addresses),
    /// instead of the default: anywhere but loopback, link-local, multicast and unspecified
    #[arg(long, value_name = "LIST")]
    pub(super) http_allow: Option<String>,
    /// The longest an http task without its own timeout may take
    #[arg(long, default_value = "5m", value_name = "DUR")]
    pub(super) http_timeout: String,
    /// Tasks run at once by this process's executors
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(super) concurrency: usize,
    /// Queues this process's executors work (comma-separated; all when absent)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub(super) queues: Vec<String>,
    /// Lease of a claimed task without a heartbeat; the leader lease is this too, at most 15s
    #[arg(long, default_value = "30s", value_name = "DUR")]
    pub(super) lease_ttl: String,
    /// How long past its timeout a task stays leased to a worker that has not reported it;
    /// then its heartbeats are refused and the task runs again
    #[arg(long, default_value = "30s", value_name = "DUR")]
    pub(super) timeout_grace: String,
    /// How long finished tasks are kept; give every node of a cluster the same value (the
    /// leader prunes) [default: 7d]
    #[arg(long, value_name = "DUR")]
    pub(super) retention: Option<String>,
    /// Export spans of enqueues, claims and runs to this OpenTelemetry collector (OTLP over
    /// HTTP, protobuf; its base URL, like http://127.0.0.1:4318)
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub(super) otlp_endpoint: Option<String>,
    /// Log as JSON lines instead of text
    #[arg(long, env = "SKED_LOG_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub(super) log_json: bool,
    /// Pretend this node's clock is off by this much (tests of clock skew), like -1m or 45s.
    #[arg(long, env = "SKED_CLOCK_SKEW", hide = true, allow_hyphen_values = true)]
    pub(super) clock_skew: Option<String>,
}

impl Common {
    /// Takes `--db` from `--db-file` when that is given.
    pub(super) fn read_db_file(&mut self) -> CliResult {
        if let Some(file) = &self.db_file {
            self.db = Some(crate::read_secret("--db-file", file)?);
        }
        Ok(())
    }
}

pub(super) fn duration(flag: &str, v: &str) -> CliResult<SignedDuration> {
    let d = sked_core::parse_duration(v)
        .map_err(|e| CliError::usage(format!("invalid {flag}: {e}")))?;
    if d < SignedDuration::from_secs(1) {
        return Err(CliError::usage(format!("{flag} must be at least 1s")));
    }
    Ok(d)
}

pub(super) fn std_duration(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or_default()
}

/// A clock that is off by a fixed amount: a stand-in for a badly set machine clock.
#[derive(Debug)]
struct SkewedClock(SignedDuration);

impl sked_core::Clock for SkewedClock {
    fn now(&self) -> jiff::Timestamp {
        let now = jiff::Timestamp::now();
        now.checked_add(self.0).unwrap_or(now)
    }
}

/// What the common flags say, checked before any connection is made (so bad flags fail fast
/// with exit code 2).
pub(super) struct Settings {
    pub(super) lease_ttl: SignedDuration,
    pub(super) timeout_grace: SignedDuration,
    pub(super) retention: Option<SignedDuration>,
    pub(super) executors: Vec<Arc<dyn Executor>>,
    pub(super) clock: Option<Arc<dyn sked_core::Clock>>,
    pub(super) telemetry: sked::Telemetry,
    /// The exporter behind `telemetry`, flushed at the end.
    pub(super) otel: Option<crate::otel::Otel>,
}

pub(super) fn settings(c: &Common) -> CliResult<Settings> {
    let lease_ttl = duration("--lease-ttl", &c.lease_ttl)?;
    let timeout_grace = duration("--timeout-grace", &c.timeout_grace)?;
    let mut options = sked::executors::BuiltinOptions::default();
    if let Some(list) = &c.http_allow {
        options.http_policy = sked::executors::HttpPolicy::allow_only(list)
            .map_err(|e| CliError::usage(format!("invalid --http-allow: {e}")))?;
    }
    options.http_timeout = Some(std_duration(duration("--http-timeout", &c.http_timeout)?));
    let executors = sked::executors::builtin(c.exec.as_deref().unwrap_or(""), &options)
        .map_err(CliError::usage)?;
    if c.http_allow.is_some() && !executors.iter().any(|e| e.kind() == "http") {
        return Err(CliError::usage(
            "--http-allow applies to the http executor: pass --exec http",
        ));
    }
    if c.concurrency == 0 {
        return Err(CliError::usage("--concurrency must be at least 1"));
    }
    let retention = c
        .retention
        .as_deref()
        .map(|r| duration("--retention", r))
        .transpose()?;
    let clock: Option<Arc<dyn sked_core::Clock>> = match &c.clock_skew {
        None => None,
        Some(skew) => {
            let (sign, magnitude) = match skew.strip_prefix('-') {
                Some(rest) => (-1, rest),
                None => (1, skew.as_str()),
            };
            let skew = sked_core::parse_duration(magnitude)
                .map_err(|e| CliError::usage(format!("invalid --clock-skew: {e}")))?;
            Some(Arc::new(SkewedClock(skew * sign)))
        }
    };
    let (otel, telemetry) = match &c.otlp_endpoint {
        Some(endpoint) => {
            let (otel, telemetry) = crate::otel::Otel::start(endpoint)?;
            (Some(otel), telemetry)
        }
        None => (None, sked::Telemetry::off()),
    };
    Ok(Settings {
        lease_ttl,
        timeout_grace,
        retention,
        executors,
        clock,
        telemetry,
        otel,
    })
}
