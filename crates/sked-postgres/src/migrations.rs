//! Numbered SQL migrations, embedded at compile time, applied in order, once each, in one
//! transaction under an advisory lock (nodes starting together wait for each other).

use sked_store::{Result, StoreError};

use crate::codec::db_err;

const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_declared.sql")),
    (3, include_str!("../migrations/0003_observe.sql")),
    (4, include_str!("../migrations/0004_queue_counts.sql")),
    (5, include_str!("../migrations/0005_analyze_queues.sql")),
    (6, include_str!("../migrations/0006_rate_limits.sql")),
    (7, include_str!("../migrations/0007_rate_bursts.sql")),
    (8, include_str!("../migrations/0008_unique_windows.sql")),
    (9, include_str!("../migrations/0009_schedule_policies.sql")),
    (10, include_str!("../migrations/0010_concurrency_keys.sql")),
    (11, include_str!("../migrations/0011_reserved_starts.sql")),
    (12, include_str!("../migrations/0012_trace_context.sql")),
    (13, include_str!("../migrations/0013_finished_by_queue.sql")),
    (14, include_str!("../migrations/0014_schedules_ahead.sql")),
    (15, include_str!("../migrations/0015_bytewise_names.sql")),
    (16, include_str!("../migrations/0016_keep_retrying.sql")),
    (17, include_str!("../migrations/0017_paused_schedules.sql")),
    (18, include_str!("../migrations/0018_sql_enqueue.sql")),
    (19, include_str!("../migrations/0019_dependencies.sql")),
    (20, include_str!("../migrations/0020_progress.sql")),
    (21, include_str!("../migrations/0021_workflows.sql")),
    (22, include_str!("../migrations/0022_edges_fillfactor.sql")),
    (
        23,
        include_str!("../migrations/0023_sql_enqueue_parents.sql"),
    ),
    (24, include_str!("../migrations/0024_batches.sql")),
    (
        25,
        include_str!("../migrations/0025_schedule_dead_runs.sql"),
    ),
    (26, include_str!("../migrations/0026_sql_enqueue_batch.sql")),
    (
        27,
        include_str!("../migrations/0027_edges_written_once.sql"),
    ),
    (
        28,
        include_str!("../migrations/0028_unique_windows_alone.sql"),
    ),
    (29, include_str!("../migrations/0029_backoff_shapes.sql")),
    (30, include_str!("../migrations/0030_expiry.sql")),
    (31, include_str!("../migrations/0031_queue_retention.sql")),
    (
        32,
        include_str!("../migrations/0032_schedule_bounds_and_calendars.sql"),
    ),
    (
        33,
        include_str!("../migrations/0033_sql_enqueue_deadline.sql"),
    ),
    (34, include_str!("../migrations/0034_queue_backoff.sql")),
    (35, include_str!("../migrations/0035_strict_key_order.sql")),
    (36, include_str!("../migrations/0036_waits.sql")),
    (
        37,
        include_str!("../migrations/0037_workflow_members_in_its_row.sql"),
    ),
    (38, include_str!("../migrations/0038_kept_stages.sql")),
    (
        39,
        include_str!("../migrations/0039_claims_take_stages.sql"),
    ),
];

/// A fingerprint of every migration's text: schemas migrated by the same migrations share it.
#[cfg(feature = "testing")]
pub(crate) fn fingerprint() -> u32 {
    // FNV-1a: stable across builds and processes, unlike `std`'s hasher.
    MIGRATIONS
        .iter()
        .flat_map(|(_, sql)| sql.bytes())
        .fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        })
}

/// How many migrations there are.
#[cfg(feature = "testing")]
pub(crate) fn count() -> usize {
    MIGRATIONS.len()
}

/// Brings the schema up to date, creating `schema` first when given (its name is validated).
pub(crate) async fn run(
    client: &mut deadpool_postgres::Object,
    schema: Option<&str>,
) -> Result<()> {
    // A search path naming a schema that does not exist yet: create the first one named.
    let wanted = match schema {
        Some(s) => Some(s.to_string()),
        None => {
            let row = client
                .query_one(
                    "SELECT current_schema() IS NULL, \
                     split_part(current_setting('search_path'), ',', 1)",
                    &[],
                )
                .await
                .map_err(db_err)?;
            let missing: bool = row.get(0);
            let first: String = row.get(1);
            missing.then(|| first.trim().trim_matches('"').to_string())
        }
    };
    if let Some(s) = &wanted {
        crate::connection::validate_schema(s)?;
    }
    let schema = wanted.as_deref();
    let tx = client.transaction().await.map_err(db_err)?;
    // One lock per schema: the key is derived from the schema's name.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext('sked_migrations:' || coalesce($1, current_schema())))",
        &[&schema],
    )
    .await
    .map_err(db_err)?;
    if let Some(schema) = schema {
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .await
            .map_err(db_err)?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS sked_migrations (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(db_err)?;
    let current: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM sked_migrations", &[])
        .await
        .map_err(db_err)?
        .get(0);
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(StoreError::Invalid(format!(
            "the database schema is version {current}, newer than this sked knows ({newest}): upgrade sked"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        tx.batch_execute(sql).await.map_err(db_err)?;
        tx.execute(
            "INSERT INTO sked_migrations (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(db_err)?;
        tracing::info!(version, "applied PostgreSQL migration");
    }
    tx.commit().await.map_err(db_err)
}
