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
//! a claim and its endings in two transactions as `sked bench drain` runs them.

use std::time::Instant;

use rusqlite::{Connection, Statement, params};
use sked_sqlite::SqliteStore;
use sked_store::ceiling::{Ceiling, CeilingParams, CeilingWorkload};

const BATCH: usize = 1000;
const COLUMNS: &str = "id, queue, kind, payload, priority, state, run_at, attempt, max_attempts, \
    timeout_ms, unique_key, backoff_base_ms, backoff_max_ms, schedule, nominal_at, created_at, \
    started_at, finished_at, lease_expires_at, worker, cancel_requested, last_error, result";
const KEYS: &str = "SELECT priority, run_at, id, queue FROM tasks WHERE state = 'available' \
    ORDER BY priority DESC, run_at, id LIMIT ?1";
const LEASE: &str = "UPDATE tasks SET state = 'running', attempt = attempt + 1, started_at = ?2, \
    lease_expires_at = ?3, worker = ?4, cancel_requested = 0 WHERE id = ?1 AND state = 'available'";
const END: &str = "UPDATE tasks SET state = 'succeeded', run_at = run_at, finished_at = ?3, \
    result = NULL, lease_expires_at = NULL WHERE id = ?1 AND state = 'running' AND attempt = ?2";

/// How a variant reads the rows it claims and ends.
#[derive(Clone, Copy, PartialEq)]
enum Reads {
    /// Not at all: the writes alone.
    None,
    /// Each row by id before its update, as the store does.
    PerRow,
}

struct Variant {
    name: &'static str,
    drop: &'static [&'static str],
    reads: Reads,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "sked's statements",
        drop: &[],
        reads: Reads::PerRow,
    },
    Variant {
        name: "the same without reading rows",
        drop: &[],
        reads: Reads::None,
    },
    Variant {
        name: "no running, no per-queue available index",
        drop: &["tasks_running", "tasks_available_queue"],
        reads: Reads::None,
    },
    Variant {
        name: "the available index alone",
        drop: &[
            "tasks_running",
            "tasks_available_queue",
            "tasks_finished",
            "tasks_waiting",
            "tasks_waiting_queue",
            "tasks_unique_key",
            "tasks_schedule",
            "tasks_schedule_active",
        ],
        reads: Reads::None,
    },
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
            let per_s = drain(&prepare(&path, v, n), v.reads, n);
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
    conn.execute_batch(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; \
         PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 0;",
    )
    .expect("the settings");
    for index in v.drop {
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
            let payload = sked_store::ceiling::payload(i).to_string();
            insert.execute(params![payload, now]).expect("a row");
        }
    }
    tx.commit().expect("the commit");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("the checkpoint");
    conn
}

/// Claims and ends every task; tasks a second.
fn drain(conn: &Connection, reads: Reads, n: usize) -> f64 {
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
            let mut get = read_statement(conn);
            let mut lease = conn.prepare_cached(LEASE).expect("the lease");
            for id in &ids {
                if reads == Reads::PerRow {
                    read(&mut get, *id);
                }
                let n = lease.execute(params![id, 1, 2, "bench"]).expect("a lease");
                assert_eq!(n, 1);
            }
            ids
        });
        if ids.is_empty() {
            break;
        }
        write(conn, |conn| {
            let mut get = read_statement(conn);
            let mut end = conn.prepare_cached(END).expect("the ending");
            for id in &ids {
                if reads == Reads::PerRow {
                    read(&mut get, *id);
                }
                assert_eq!(end.execute(params![id, 1, 3]).expect("an ending"), 1);
            }
        });
        done += ids.len();
    }
    assert_eq!(done, n);
    n as f64 / started.elapsed().as_secs_f64()
}

fn write<T>(conn: &Connection, f: impl FnOnce(&Connection) -> T) -> T {
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let out = f(conn);
    conn.execute_batch("COMMIT").expect("commit");
    out
}

fn read_statement(conn: &Connection) -> rusqlite::CachedStatement<'_> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"))
        .expect("the read")
}

/// Reads every column of the row, as the store's decoding does.
fn read(get: &mut Statement<'_>, id: i64) {
    get.query_row([id], |r| {
        for i in 0..23 {
            r.get_ref(i)?;
        }
        Ok(())
    })
    .expect("the row");
}
