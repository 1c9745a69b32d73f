//! How a [`crate::PgStore`] connects: its options, the settings of every connection, the
//! pool, and the guard that closes a connection rather than pool it again when its operation
//! leaves it in doubt.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use sked_store::{Result, StoreError};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{conninfo, listen};

/// How a [`PgStore`] connects.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// A libpq-style URL: `postgres://user@host:5432/db`.
    pub url: String,
    /// The schema for sked's tables (created if missing); the URL's `search_path` when `None`.
    pub schema: Option<String>,
    /// Connections in the pool (besides the one that listens).
    pub pool_size: usize,
    /// The longest any one store operation may take before it fails as unavailable.
    pub op_timeout: Duration,
    /// How long to wait to connect, or for a free pooled connection.
    pub connect_timeout: Duration,
    /// How long PostgreSQL lets a pooled connection sit idle inside an open transaction
    /// before it ends the session (`idle_in_transaction_session_timeout`; zero leaves the
    /// server's setting alone). A node cut off from the database in the middle of a
    /// transaction would otherwise hold that transaction's row locks, a schedule's say, for
    /// as long as the server takes to notice the dead connection: with a network that drops
    /// packets, until the partition heals.
    pub idle_in_transaction_timeout: Duration,
    /// The fewest tasks of a workflow's stage (tasks made together that wait for the same
    /// parents and share every column but the payload) kept as one row until the stage is
    /// released (docs/decisions/0023-tasks-made-when-released.md); `None`: every task is a
    /// row from the start. [`KEPT_STAGE_MIN`] by default. A stage whose payloads take more
    /// than [`KEPT_PAYLOAD_BYTES`] of JSON together is rows whatever its size.
    pub kept_stage_min: Option<usize>,
    /// The most tasks of a kept stage in one part: once the stage is released, claims take
    /// its tasks part by part, making them rows as their leases, and claims running together
    /// take different parts (docs/decisions/0026-claims-that-take-a-released-stage.md).
    /// [`KEPT_STAGE_PART`] by default; `None`: a kept stage is one part, and its release
    /// makes its tasks rows.
    pub kept_stage_part: Option<usize>,
}

pub use sked_store::kept::{KEPT_PAYLOAD_BYTES, KEPT_STAGE_MIN, KEPT_STAGE_PART};

impl PgOptions {
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            schema: None,
            pool_size: 8,
            op_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(1),
            kept_stage_min: Some(KEPT_STAGE_MIN),
            kept_stage_part: Some(KEPT_STAGE_PART),
        }
    }
}

/// The settings of every connection to `opts.url`, and how to make its TLS sessions.
pub(crate) fn settings(opts: &PgOptions) -> Result<(tokio_postgres::Config, MakeRustlsConnect)> {
    let (mut config, tls) = conninfo::parse(&opts.url).map_err(StoreError::Invalid)?;
    let tls = tls.connector().map_err(StoreError::Invalid)?;
    config
        .connect_timeout(opts.connect_timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(10))
        .keepalives_interval(Duration::from_secs(5))
        .keepalives_retries(3)
        // Keepalives are not sent while a request waits for its acknowledgement: a cut
        // network would otherwise hold such a connection for the kernel's fifteen minutes.
        .tcp_user_timeout(Duration::from_secs(30));
    if config.get_application_name().is_none() {
        config.application_name("sked");
    }
    if let Some(schema) = &opts.schema {
        validate_schema(schema)?;
        config.options(format!("-c search_path={schema}"));
    }
    Ok((config, tls))
}

/// The pool of connections operations run on (the listener has its own connection).
pub(crate) fn pool(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    opts: &PgOptions,
) -> Result<Pool> {
    let manager = Manager::from_config(
        config.clone(),
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(opts.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(opts.connect_timeout))
        .create_timeout(Some(opts.connect_timeout))
        .recycle_timeout(Some(opts.connect_timeout))
        .post_create(idle_in_transaction_hook(opts.idle_in_transaction_timeout))
        .build()
        .map_err(|e| StoreError::Invalid(format!("cannot build the connection pool: {e}")))
}

/// Sets `idle_in_transaction_session_timeout` on each new pooled connection: with a `SET`
/// rather than a startup option, which connection poolers such as PgBouncer refuse.
fn idle_in_transaction_hook(timeout: Duration) -> deadpool_postgres::Hook {
    let millis = timeout.as_millis();
    deadpool_postgres::Hook::async_fn(move |client, _| {
        Box::pin(async move {
            if millis > 0 {
                client
                    .batch_execute(&format!(
                        "SET idle_in_transaction_session_timeout = {millis}"
                    ))
                    .await
                    .map_err(deadpool_postgres::HookError::Backend)?;
            }
            Ok(())
        })
    })
}

/// A pooled connection that goes back to the pool when dropped, unless its operation failed
/// as unavailable (`close`): then it is closed, and the listener checks its own connection.
pub(crate) struct Pooled<'a> {
    pub(crate) object: Option<deadpool_postgres::Object>,
    pub(crate) close: bool,
    pub(crate) listener: &'a listen::Listener,
}

impl Pooled<'_> {
    pub(crate) fn object(&mut self) -> &mut deadpool_postgres::Object {
        self.object.as_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let (true, Some(object)) = (self.close, self.object.take()) {
            drop(deadpool_postgres::Object::take(object));
            self.listener.doubt();
        }
    }
}

/// Schema names go into SQL text: plain identifiers only.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "invalid schema name {schema:?}: use lowercase letters, digits and _"
        )))
    }
}

/// The database server's clock now.
pub(crate) async fn server_time(c: &mut deadpool_postgres::Object) -> Result<jiff::Timestamp> {
    let stmt = c
        .prepare_cached("SELECT clock_timestamp()")
        .await
        .map_err(crate::codec::db_err)?;
    let row = c
        .query_one(&stmt, &[])
        .await
        .map_err(crate::codec::db_err)?;
    Ok(row.get(0))
}
