//! [`ScratchSchema`]: a throwaway schema for one benchmark run or one test, so that runs on a
//! shared database never see each other's tables. Dropping it drops the schema and everything
//! in it, after ending any connection still using it.

use std::sync::atomic::{AtomicU32, Ordering};

/// A schema of its own, dropped (with everything in it) when this is dropped.
#[derive(Debug)]
pub struct ScratchSchema {
    /// The schema's name: `sked_test_<pid>_<n>_<random>`.
    pub name: String,
    /// The database URL it lives in, without a search path.
    pub base_url: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// `base_url` with its connections named after `schema`, so that clean-up can end stragglers.
fn named_url(base_url: &str, schema: &str) -> String {
    let sep = if base_url.contains('?') { '&' } else { '?' };
    format!("{base_url}{sep}application_name={schema}")
}

/// Options that connect a store to `schema` (a pool of 4 connections named after it).
pub(crate) fn schema_options(base_url: &str, schema: &str) -> crate::PgOptions {
    let mut opts = crate::PgOptions::new(named_url(base_url, schema));
    opts.schema = Some(schema.to_string());
    opts.pool_size = 4;
    opts
}

impl ScratchSchema {
    /// A new, unique schema name (the schema itself is created by the store on connect).
    pub fn new(base_url: &str) -> ScratchSchema {
        let name = format!(
            "sked_test_{}_{}_{:04x}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            fastrand::u16(..)
        );
        ScratchSchema {
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
        named_url(&self.base_url, &self.name)
    }

    /// Options that connect a store to this schema (a pool of 4 connections).
    pub fn options(&self) -> crate::PgOptions {
        schema_options(&self.base_url, &self.name)
    }
}

impl Drop for ScratchSchema {
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
                // A connection of the run's may still hold locks (its runtime is blocked
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
