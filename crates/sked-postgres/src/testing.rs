//! Test support (the `testing` feature, for tests only): a fresh schema per test in the
//! database named by `SKED_TEST_DATABASE_URL`. Used by this crate's conformance run and by the
//! end-to-end tests of the other crates.

pub use crate::scratch::ScratchSchema as TestSchema;

/// The variable naming the test database.
pub const DATABASE_URL_VAR: &str = "SKED_TEST_DATABASE_URL";

/// The test database's URL. `None` (the PostgreSQL tests are skipped) when the variable is
/// unset, unless `CI` is set: CI must run them, so there it is a failure.
pub fn database_url() -> Option<String> {
    match std::env::var(DATABASE_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{DATABASE_URL_VAR} is not set, and CI must run the PostgreSQL tests")
        }
        _ => None,
    }
}

/// A store on a fresh schema, with the guard that drops it; `None` when no test database is set.
pub async fn fresh_store() -> Option<(crate::PgStore, TestSchema)> {
    let url = database_url()?;
    let schema = TestSchema::new(&url);
    let store = crate::PgStore::connect(schema.options())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    Some((store, schema))
}

/// A store on a schema of the test pool, emptied for this test; `None` when no test database is
/// set. Cheaper than [`fresh_store`]: the pool's schemas are migrated once and then emptied
/// (`TRUNCATE … RESTART IDENTITY`) for each test, which keeps the planner's statistics and the
/// cumulative statistics of earlier tests; tests of plans or of index reads take a fresh one.
pub async fn pooled_store() -> Option<(crate::PgStore, PooledSchema)> {
    pooled_store_with(|_| {}).await
}

/// [`pooled_store`], keeping every stage of a workflow that qualifies until it is released
/// (`PgOptions::kept_stage_min` of 1), however small, in parts of two tasks that claims take
/// (`PgOptions::kept_stage_part`): the suite run this way checks that kept stages show
/// through the API as rows do, and that claims take them in claim order.
pub async fn pooled_store_keeping_stages() -> Option<(crate::PgStore, PooledSchema)> {
    pooled_store_with(|o| {
        o.kept_stage_min = Some(1);
        o.kept_stage_part = Some(2);
    })
    .await
}

/// [`pooled_store`] with its options changed by `change`.
pub async fn pooled_store_with(
    change: impl FnOnce(&mut crate::PgOptions),
) -> Option<(crate::PgStore, PooledSchema)> {
    let url = database_url()?;
    let schema = PooledSchema::take(&url).await;
    let mut options = schema.options();
    change(&mut options);
    let store = crate::PgStore::connect(options)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    Some((store, schema))
}

/// A schema of the test pool, held for one test by a session advisory lock: the pool's schemas
/// are named after the migrations' fingerprint and a number, and a test takes the first one no
/// other test (of any process) holds. Dropping it ends the holding session, which frees it.
#[derive(Debug)]
pub struct PooledSchema {
    /// The schema's name: `sked_pool_<fingerprint>_<n>`.
    pub name: String,
    /// The database URL it lives in, without a search path.
    pub base_url: String,
    _holder: tokio_postgres::Client,
}

impl PooledSchema {
    async fn take(base_url: &str) -> PooledSchema {
        let (holder, conn) = tokio_postgres::connect(base_url, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {base_url}: {e}"));
        tokio::spawn(conn);
        let fingerprint = crate::migrations::fingerprint();
        let key = (fingerprint & 0x7fff_ffff) as i32;
        let mut n = 0;
        loop {
            let row = holder
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&key, &n])
                .await
                .unwrap();
            if row.get(0) {
                break;
            }
            n += 1;
        }
        let name = format!("sked_pool_{fingerprint:08x}_{n}");
        // The previous test's connections may still be open: end them, then empty the tables
        // (a schema the migrations never completed is dropped; the store makes it again).
        holder
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1 AND pid <> pg_backend_pid()",
                &[&name],
            )
            .await
            .unwrap();
        let tables: Vec<String> = holder
            .query(
                "SELECT quote_ident(tablename) FROM pg_tables \
                 WHERE schemaname = $1 AND tablename <> 'sked_migrations'",
                &[&name],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| format!("{name}.{}", r.get::<_, String>(0)))
            .collect();
        let migrated = !tables.is_empty()
            && holder
                .query_one(
                    &format!("SELECT count(*) = $1 FROM {name}.sked_migrations"),
                    &[&(crate::migrations::count() as i64)],
                )
                .await
                .is_ok_and(|r| r.get(0));
        let reset = if migrated {
            format!("TRUNCATE {} RESTART IDENTITY CASCADE", tables.join(", "))
        } else {
            format!("DROP SCHEMA IF EXISTS {name} CASCADE")
        };
        holder.batch_execute(&reset).await.unwrap();
        PooledSchema {
            name,
            base_url: base_url.to_string(),
            _holder: holder,
        }
    }

    /// Options that connect a store to this schema (a pool of 4 connections), its connections
    /// named after the schema.
    pub fn options(&self) -> crate::PgOptions {
        crate::scratch::schema_options(&self.base_url, &self.name)
    }
}

/// The statement of a claim over every queue (`$1` now, `$2` the lease's end, `$3` the
/// worker, `$4` at most how many, `$5` the timeout grace), locking at most two parts of kept
/// stages, for tests of its query plan; with `after`, the claim that resumes after a
/// claim-order key (`$6` priority, `$7` run time, `$8` id).
pub fn claim_sql(after: bool) -> String {
    let candidates = crate::tasks::claim::sql::Candidates {
        rows: "state = 'available'".into(),
        parts: "s.released".into(),
        parts_placeholder: "2".into(),
    };
    crate::tasks::claim::sql::claim_sql(&candidates, after, true, true)
}

/// The planner setting a claim runs under, and its reset (see `tasks::claim::sql::ORDERED_WALK`),
/// for tests of its plan.
pub fn claim_planner_setting() -> (&'static str, &'static str) {
    use crate::tasks::claim::sql::{ORDERED_WALK, ORDERED_WALK_END};
    (ORDERED_WALK, ORDERED_WALK_END)
}

/// The statement of a batch of `n` successes (`$1` ids, `$2` attempts, `$3` times, `$4`
/// results), returning the ids, for tests of its plan.
pub fn success_sql(n: usize) -> String {
    crate::tasks::endings::success_sql(n)
}

/// The statement that counts waits down, releases and cancels their tasks (`$1`–`$6`), for
/// tests of its plan.
pub fn release_sql() -> &'static str {
    crate::tasks::dependents::COUNT_RELEASE_CANCEL
}

/// A heartbeat's statement (`$1` id, `$2` attempt, `$3` lease end, `$4` grace in ms, `$5`
/// now), for tests of its plan.
pub fn heartbeat_sql() -> String {
    crate::tasks::claim::sql::HEARTBEAT.clone()
}

/// Retention's statement (`$1` finished before, `$2` at most how many), for tests of its plan.
pub fn prune_sql() -> String {
    crate::tasks::PRUNE.clone()
}

/// Retention's statement for a bounded pass (`$3` finished since), for tests of its plan.
pub fn prune_since_sql() -> String {
    crate::tasks::PRUNE_SINCE.clone()
}

/// The statement of ended tasks per time bucket (`$1` since, `$2` the bucket's width in µs),
/// for tests of its plan.
pub fn activity_sql() -> String {
    crate::observe::ENDED.clone()
}
