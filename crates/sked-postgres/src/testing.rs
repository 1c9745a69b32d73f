//! Test support: a fresh schema per test in the database named by `SKED_TEST_DATABASE_URL`.
//! Used by this crate's conformance run and by the end-to-end tests of the other crates.

use std::sync::atomic::{AtomicU32, Ordering};

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

/// A schema of its own for one test, dropped (with everything in it) when this is dropped.
#[derive(Debug)]
pub struct TestSchema {
    pub name: String,
    pub base_url: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl TestSchema {
    /// A new, unique schema name (the schema itself is created by the store on connect).
    pub fn new(base_url: &str) -> TestSchema {
        let name = format!(
            "sked_test_{}_{}_{:04x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            fastrand::u16(..)
        );
        TestSchema {
            name,
            base_url: base_url.to_string(),
        }
    }

    /// The base URL with this schema as the search path, for `--db` of a child process.
    /// Connections are named after the schema, so that clean-up can end stragglers.
    pub fn url(&self) -> String {
        format!("{}&options=-csearch_path%3D{}", self.named_url(), self.name)
    }

    fn named_url(&self) -> String {
        let sep = if self.base_url.contains('?') {
            '&'
        } else {
            '?'
        };
        format!("{}{sep}application_name={}", self.base_url, self.name)
    }

    pub fn options(&self) -> crate::PgOptions {
        let mut opts = crate::PgOptions::new(self.named_url());
        opts.schema = Some(self.name.clone());
        opts.pool_size = 4;
        opts
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let (url, name) = (self.base_url.clone(), self.name.clone());
        // Drop may run inside a runtime: do the clean-up on a thread with its own.
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await
                else {
                    return;
                };
                tokio::spawn(conn);
                // A connection of the test's may still hold locks (its runtime is blocked
                // here, or its process was killed): end them first.
                let _ = client
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                        &[&name],
                    )
                    .await;
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            });
        });
        let _ = cleanup.join();
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
