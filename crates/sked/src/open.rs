//! Opening a store from a database URL: the one place that knows which backends this build
//! has (cargo features `sqlite` and `postgres`) and which URL names which.

use std::sync::Arc;

use sked_store::{Store, StoreError};

use crate::Result;

/// The backend a database URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

fn backend_of(url: &str) -> Backend {
    if url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || is_key_value_string(url)
    {
        Backend::Postgres
    } else {
        Backend::Sqlite
    }
}

/// Whether this is a PostgreSQL key/value connection string (`host=db dbname=sked …`): it
/// starts with a lowercase keyword and `=`. A SQLite file whose name looks like that is named
/// with `sqlite://`.
fn is_key_value_string(url: &str) -> bool {
    url.split_once('=').is_some_and(|(key, _)| {
        let key = key.trim();
        !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    })
}

#[allow(dead_code)] // Unused when the build has every backend.
fn not_built(name: &str, feature: &str) -> crate::Error {
    StoreError::Invalid(format!(
        "this build of sked has no {name} backend (cargo feature `{feature}` of the sked crate)"
    ))
    .into()
}

/// Opens the store named by a database URL: `postgres://…` (or `postgresql://…`, or a
/// key/value connection string `host=… dbname=…`) for PostgreSQL, `sqlite://PATH` or a plain path for SQLite. A backend left out of the build is
/// an invalid-input error naming the feature to enable.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>> {
    match backend_of(url) {
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(Arc::new(sked_postgres::PgStore::connect_url(url).await?)),
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres => Err(not_built("PostgreSQL", "postgres")),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(Arc::new(sked_sqlite::SqliteStore::open_url(url)?)),
        #[cfg(not(feature = "sqlite"))]
        Backend::Sqlite => Err(not_built("SQLite", "sqlite")),
    }
}

/// A store opened for a benchmark: its backend's benchmark hooks, and its data kept alive;
/// dropping it removes the data (PostgreSQL: the scratch schema and everything in it).
#[cfg(feature = "bench")]
pub struct Scratch {
    /// The backend's hooks on the same data (settling, ceilings, a held snapshot, sizes).
    pub bench: Arc<dyn sked_store::bench::Bench>,
    #[cfg(feature = "postgres")]
    _schema: Option<sked_postgres::ScratchSchema>,
}

#[cfg(feature = "bench")]
impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").finish_non_exhaustive()
    }
}

/// Opens a store for a benchmark run: on PostgreSQL in a schema of its own (with
/// `pool_size` connections) that is dropped with the returned [`Scratch`]; an SQLite URL is
/// opened as it is.
#[cfg(feature = "bench")]
pub async fn open_scratch_store(url: &str, pool_size: usize) -> Result<(Arc<dyn Store>, Scratch)> {
    let (mut stores, scratch) = open_scratch_stores(url, pool_size, 1).await?;
    Ok((stores.remove(0), scratch))
}

/// [`open_scratch_store`] with `nodes` stores on the same data, each with its own connections,
/// as separate processes would have (PostgreSQL only; SQLite gives one). The hooks are the
/// first store's.
#[cfg(feature = "bench")]
pub async fn open_scratch_stores(
    url: &str,
    pool_size: usize,
    nodes: usize,
) -> Result<(Vec<Arc<dyn Store>>, Scratch)> {
    match backend_of(url) {
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let schema = sked_postgres::ScratchSchema::new(url);
            let mut stores = Vec::with_capacity(nodes);
            for _ in 0..nodes.max(1) {
                let mut opts = schema.options();
                opts.pool_size = pool_size;
                stores.push(Arc::new(sked_postgres::PgStore::connect(opts).await?));
            }
            let bench = stores[0].clone();
            let stores = stores.into_iter().map(|s| s as Arc<dyn Store>).collect();
            Ok((
                stores,
                Scratch {
                    bench,
                    _schema: Some(schema),
                },
            ))
        }
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres => Err(not_built("PostgreSQL", "postgres")),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            let _ = pool_size;
            let store = Arc::new(sked_sqlite::SqliteStore::open_url(url)?);
            Ok((
                vec![store.clone() as Arc<dyn Store>],
                Scratch {
                    bench: store,
                    #[cfg(feature = "postgres")]
                    _schema: None,
                },
            ))
        }
        #[cfg(not(feature = "sqlite"))]
        Backend::Sqlite => Err(not_built("SQLite", "sqlite")),
    }
}

/// The URL with every password in it replaced by `…`, for logs and errors: the one in its
/// user information (`postgres://user:…@host`) and the value of any `password=` or
/// `sslpassword=` parameter (`?password=…`, or a `key=value` connection string).
pub fn redacted_url(url: &str) -> String {
    let url = match url.split_once("://") {
        Some((scheme, rest)) => {
            // The authority ends at the first `/`, `?` or `#`; credentials end at its last `@`.
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, path) = rest.split_at(end);
            match authority.rsplit_once('@') {
                Some((credentials, host)) => match credentials.split_once(':') {
                    Some((user, _)) => format!("{scheme}://{user}:…@{host}{path}"),
                    None => url.to_string(),
                },
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    };
    redact_parameters(&url)
}

/// `…` for the value of every parameter whose name ends in `password` (ASCII case ignored),
/// up to the next `&`, `#` or white space (a quoted value up to its closing quote).
fn redact_parameters(s: &str) -> String {
    const KEY: &str = "password=";
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(KEY) {
        let value = at + found + KEY.len();
        out.push_str(&s[at..value]);
        out.push('…');
        let rest = &s[value..];
        let len = match rest.strip_prefix('\'') {
            Some(quoted) => quoted.find('\'').map_or(rest.len(), |end| end + 2),
            None => rest.find(['&', '#', ' ', '\t', '\n']).unwrap_or(rest.len()),
        };
        at = value + len;
    }
    out.push_str(&s[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_not_logged() {
        assert_eq!(
            redacted_url("postgres://sked:s3cr@t@db.internal:5432/sked?sslmode=require"),
            "postgres://sked:…@db.internal:5432/sked?sslmode=require"
        );
        assert_eq!(
            redacted_url("postgres://sked@db:5432/sked"),
            "postgres://sked@db:5432/sked"
        );
        assert_eq!(redacted_url("sqlite://sked.db"), "sqlite://sked.db");
        assert_eq!(
            redacted_url("postgres://u:one@db/sked?password=two&sslmode=require&SSLPassword=3"),
            "postgres://u:…@db/sked?password=…&sslmode=require&SSLPassword=…"
        );
        assert_eq!(
            redacted_url("host=db password='a b' user=u password=c"),
            "host=db password=… user=u password=…"
        );
        assert_eq!(redacted_url("sked.db"), "sked.db");
    }

    #[test]
    fn urls_name_their_backend() {
        assert_eq!(backend_of("postgres://u@h/db"), Backend::Postgres);
        assert_eq!(backend_of("postgresql://u@h/db"), Backend::Postgres);
        assert_eq!(backend_of("sqlite://sked.db"), Backend::Sqlite);
        assert_eq!(backend_of("sked.db"), Backend::Sqlite);
        assert_eq!(backend_of("host=db dbname=sked"), Backend::Postgres);
        assert_eq!(backend_of(" user = u"), Backend::Postgres);
        assert_eq!(backend_of("/var/lib/a=b.db"), Backend::Sqlite);
        assert_eq!(backend_of("sqlite://host=x.db"), Backend::Sqlite);
    }
}
