//! Reads of a store's file for other crates' tests, beside a server that has it open.

use std::path::Path;

use sked_store::Result;

use crate::codec::db_err;

/// How many parts of kept stages the store at `path` holds
/// (docs/decisions/0027-kept-stages-on-sqlite.md).
pub fn kept_parts(path: &Path) -> Result<i64> {
    let conn = rusqlite::Connection::open(path).map_err(db_err)?;
    conn.query_row("SELECT count(*) FROM stages", [], |r| r.get(0))
        .map_err(db_err)
}
