//! What sked's SQLite schema itself costs a drain, apart from sked's code: the statements a claim
//! and an ending issue, run from a plain loop on the store's own file and settings, on the full
//! schema and on copies with indexes dropped, beside the store's ceiling (claim a batch with
//! one `UPDATE`, delete it) in the same run.
//!
//! ```sh
//! cargo run --release -p sked-sqlite --example schema_cost -- [N] [ROUNDS]
//! ```
//!
//! Each line is one variant's drain of N available tasks (default 100,000) in claims of 1,000,
//! a claim and its endings in two transactions as `sked bench drain` runs them. "Batches" are
//! the store's statements (`tasks/multi_row.rs`): a claim's or an ending's rows read by one
//! statement, the leases written by one `UPDATE … WHERE id IN rarray(?)`, the endings by
//! `UPDATE … FROM (VALUES …)` of up to 64 rows; "per row" is one read and one update per task,
//! as the store ran them before.

use std::time::Instant;

use rusqlite::{Connection, Statement, ToSql, params};
use sked_sqlite::SqliteStore;
use sked_store::bench::{Bench, CeilingParams, CeilingWorkload};

const BATCH: usize = 1000;
const COLUMNS: &str = "id, queue, kind, payload, priority, state, run_at, attempt, max_attempts, \
    timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at, \
    started_at, finished_at, lease_expires_at, worker, cancel_requested, last_error, result";
const KEYS: &str = "SELECT priority, run_at, id, queue FROM tasks WHERE state = 'available' \
    AND queue = 'default' ORDER BY priority DESC, run_at, id LIMIT ?1";
const LEASE: &str = "UPDATE tasks SET state = 'running', attempt = attempt + 1, started_at = ?2, \
    lease_expires_at = ?3, worker = ?4, cancel_requested = 0 WHERE id = ?1 AND state = 'available'";
const LEASE_BATCH: &str = "UPDATE tasks SET state = 'running', attempt = attempt + 1, \
    started_at = ?2, lease_expires_at = ?3, worker = ?4, cancel_requested = 0 \
    WHERE id IN rarray(?1) AND state = 'available'";
const END: &str = "UPDATE tasks SET state = 'succeeded', run_at = run_at, finished_at = ?3, \
    result = NULL, lease_expires_at = NULL WHERE id = ?1 AND state = 'running' AND attempt = ?2";
/// Endings a batch statement writes, largest first, as the store's.
const ENDINGS: [usize; 4] = [64, 16, 4, 1];

/// How a variant reads the rows it claims and ends.
#[derive(Clone, Copy, PartialEq)]
enum Reads {
    /// Not at all: the writes alone.
    None,
    /// Each row by id before its update.
    PerRow,
    /// Each row as its update returns it (`RETURNING`).
    Returning,
    /// A claim's or an ending's rows by one statement.
    Batch,
}

struct Variant {
    name: &'static str,
    reads: Reads,
    /// Writes as the store's batches, or one update per task.
    batch: bool,
    /// Indexes dropped besides [`UNTOUCHED`], when `untouched` is set.
    drop: &'static [&'static str],
    /// Drop the indexes a drained task never enters.
    untouched: bool,
}

/// The partial indexes a drained task never enters: a statement that changes the state still
/// opens each and tests its predicate.
const UNTOUCHED: &[&str] = &[
    "tasks_waiting",
    "tasks_waiting_queue",
    "tasks_unique_key",
    "tasks_schedule",
    "tasks_schedule_active",
    "tasks_unique_until",
    "tasks_available_key",
];

const fn variant(name: &'static str, reads: Reads, batch: bool) -> Variant {
    Variant {
        name,
        reads,
        batch,
        drop: &[],
        untouched: false,
    }
}

const fn fewer(name: &'static str, reads: Reads, drop: &'static [&'static str]) -> Variant {
    Variant {
        name,
        reads,
        batch: true,
        drop,
        untouched: true,
    }
}

const VARIANTS: &[Variant] = &[
    variant("per row", Reads::PerRow, false),
    variant(
        "per row, rows returned by the updates",
        Reads::Returning,
        false,
    ),
    variant("per row, without reading rows", Reads::None, false),
    variant("batches (the store's statements)", Reads::Batch, true),
    variant("batches without reading rows", Reads::None, true),
    fewer("  and without the untouched indexes", Reads::None, &[]),
    fewer(
        "  and no all-queue available",
        Reads::None,
        &["tasks_available"],
    ),
    fewer(
        "  and no all-queue available, no running",
        Reads::None,
        &["tasks_available", "tasks_running"],
    ),
    fewer(
        "  and no all-queue available, no finished",
        Reads::None,
        &["tasks_available", "tasks_finished"],
    ),
    fewer(
        "  and the per-queue available alone",
        Reads::None,
        &["tasks_available", "tasks_running", "tasks_finished"],
    ),
    fewer(
        "batches on the per-queue available alone",
        Reads::Batch,
        &["tasks_available", "tasks_running", "tasks_finished"],
    ),
];

fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<usize>().expect("a number"));
    let n = args.next().unwrap_or(100_000);
    let rounds = args.next().unwrap_or(2);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for round in 1..=rounds {
        let path = dir.path().join(format!("ceiling-{round}.db"));
        let store = SqliteStore::open(&path).expect("the store");
        let ceiling = rt
            .block_on(store.ceiling(CeilingParams {
                workload: CeilingWorkload::Drain,
                n,
                batch: BATCH,
                clients: 1,
            }))
            .expect("the ceiling")
            .per_s();
        println!("round {round}: ceiling {ceiling:>9.0}/s");
        drop(store);
        for v in VARIANTS {
            let path = dir
                .path()
                .join(format!("{}-{round}.db", v.name.replace(' ', "-")));
            let per_s = drain(&prepare(&path, v, n), v, n);
            println!(
                "round {round}: {:<45} {per_s:>9.0}/s  {:>4.0} % of ceiling",
                v.name,
                100.0 * per_s / ceiling
            );
        }
    }
}

/// A database in the store's schema and settings, without `v`'s indexes, holding `n` available
/// tasks, checkpointed as `sked bench drain` leaves it.
fn prepare(path: &std::path::Path, v: &Variant, n: usize) -> Connection {
    drop(SqliteStore::open(path).expect("the store"));
    let mut conn = Connection::open(path).expect("the file");
    rusqlite::vtab::array::load_module(&conn).expect("rarray");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
         PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 0;",
    )
    .expect("the settings");
    let untouched = if v.untouched { UNTOUCHED } else { &[] };
    for index in v.drop.iter().chain(untouched) {
        conn.execute_batch(&format!("DROP INDEX {index}"))
            .expect("the index");
    }
    let tx = conn.transaction().expect("a transaction");
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO tasks (queue, kind, payload, priority, state, run_at, max_attempts, \
                 created_at) VALUES ('default', 'noop', ?1, 0, 'available', ?2, 25, ?2)",
            )
            .expect("the insert");
        let now = jiff::Timestamp::now().as_microsecond();
        for i in 0..n {
            let payload = sked_store::bench::payload(i).to_string();
            insert.execute(params![payload, now]).expect("a row");
        }
    }
    tx.commit().expect("the commit");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("the checkpoint");
    conn
}

/// Claims and ends every task; tasks a second.
fn drain(conn: &Connection, v: &Variant, n: usize) -> f64 {
    let started = Instant::now();
    let mut done = 0;
    loop {
        let ids: Vec<i64> = write(conn, |conn| {
            let ids: Vec<i64> = conn
                .prepare_cached(KEYS)
                .expect("the keys")
                .query_map([BATCH as i64], |r| r.get(2))
                .expect("the keys")
                .collect::<rusqlite::Result<_>>()
                .expect("the keys");
            if v.reads == Reads::Batch {
                read_batch(conn, &ids);
            }
            if v.batch {
                let list = ids_array(&ids);
                let mut lease = conn.prepare_cached(LEASE_BATCH).expect("the leases");
                let n = lease
                    .execute(params![list, 1, 2, "bench"])
                    .expect("the leases");
                assert_eq!(n, ids.len());
                return ids;
            }
            let sql = match v.reads {
                Reads::Returning => format!("{LEASE} RETURNING {COLUMNS}"),
                _ => LEASE.to_string(),
            };
            let mut lease = conn.prepare_cached(&sql).expect("the lease");
            for id in &ids {
                per_row(conn, v.reads, &mut lease, params![id, 1, 2, "bench"], *id);
            }
            ids
        });
        if ids.is_empty() {
            break;
        }
        write(conn, |conn| {
            if v.reads == Reads::Batch {
                read_batch(conn, &ids);
            }
            if v.batch {
                return end_batch(conn, &ids);
            }
            let sql = match v.reads {
                Reads::Returning => format!("{END} RETURNING {COLUMNS}"),
                _ => END.to_string(),
            };
            let mut end = conn.prepare_cached(&sql).expect("the ending");
            for id in &ids {
                per_row(conn, v.reads, &mut end, params![id, 1, 3], *id);
            }
        });
        done += ids.len();
    }
    assert_eq!(done, n);
    n as f64 / started.elapsed().as_secs_f64()
}

/// One task's write with `update` and `args`, its row read as `reads` says.
fn per_row(
    conn: &Connection,
    reads: Reads,
    update: &mut Statement<'_>,
    args: impl rusqlite::Params,
    id: i64,
) {
    match reads {
        Reads::Returning => read(update, args),
        _ => {
            if reads == Reads::PerRow {
                let mut get = conn
                    .prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"))
                    .expect("the read");
                read(&mut get, [id]);
            }
            assert_eq!(update.execute(args).expect("a write"), 1);
        }
    }
}

/// `ids` bound as the store binds them, for `rarray(?)`.
fn ids_array(ids: &[i64]) -> rusqlite::vtab::array::Array {
    std::rc::Rc::new(
        ids.iter()
            .map(|&id| rusqlite::types::Value::Integer(id))
            .collect(),
    )
}

/// The rows of `ids` by one statement, every column read.
fn read_batch(conn: &Connection, ids: &[i64]) {
    let list = ids_array(ids);
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE id IN rarray(?1)"
        ))
        .expect("the rows");
    let mut rows = stmt.query([list]).expect("the rows");
    while let Some(r) = rows.next().expect("a row") {
        for i in 0..23 {
            r.get_ref(i).expect("a column");
        }
    }
}

/// Ends `ids` as the store's batches do: rows of parameters, up to 64 to a statement.
fn end_batch(conn: &Connection, ids: &[i64]) {
    let mut rest = ids;
    while !rest.is_empty() {
        let size = *ENDINGS.iter().find(|s| **s <= rest.len()).expect("a size");
        let rows: Vec<String> = (0..size)
            .map(|r| {
                let p: Vec<String> = (1..=8).map(|c| format!("?{}", r * 8 + c)).collect();
                format!("({})", p.join(", "))
            })
            .collect();
        let sql = format!(
            "UPDATE tasks SET state = e.column3, run_at = e.column4, max_attempts = e.column5, \
               finished_at = e.column6, last_error = coalesce(e.column7, tasks.last_error), \
               result = e.column8, lease_expires_at = NULL FROM (VALUES {}) AS e \
             WHERE tasks.id = e.column1 AND tasks.state = 'running' AND tasks.attempt = e.column2",
            rows.join(", ")
        );
        let (now, later) = rest.split_at(size);
        let mut stmt = conn.prepare_cached(&sql).expect("the endings");
        for (r, id) in now.iter().enumerate() {
            let values: [&dyn ToSql; 8] = [
                id,
                &1,
                &"succeeded",
                &0,
                &25,
                &3,
                &None::<String>,
                &None::<String>,
            ];
            for (c, v) in values.into_iter().enumerate() {
                stmt.raw_bind_parameter(r * 8 + c + 1, v).expect("a value");
            }
        }
        assert_eq!(stmt.raw_execute().expect("the endings"), size);
        rest = later;
    }
}

fn write<T>(conn: &Connection, f: impl FnOnce(&Connection) -> T) -> T {
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let out = f(conn);
    conn.execute_batch("COMMIT").expect("commit");
    out
}

/// Reads every column of the row, as the store's decoding does.
fn read(get: &mut Statement<'_>, args: impl rusqlite::Params) {
    get.query_row(args, |r| {
        for i in 0..23 {
            r.get_ref(i)?;
        }
        Ok(())
    })
    .expect("the row");
}
