//! WAL checkpoints on a thread of their own, so that no commit pays for copying the WAL back
//! into the database file (automatic checkpoints are off on the main connection).
//!
//! A passive checkpoint never blocks the writer, but under a writer that never pauses (a
//! drain of a large backlog) it never catches up either: SQLite starts the WAL again from its
//! beginning only once every frame has been copied, so the WAL grew without bound (75 MB in a
//! drain of 200,000 tasks lasting two seconds, 507 MB in one of 1,000,000). Once the WAL passes
//! [`WAL_LIMIT`], the thread takes the store's writing connection, so that no write comes
//! between, and makes a `RESTART` checkpoint on it, which copies the last frames; the next
//! commit writes the WAL from its start again, and `journal_size_limit` (set on every
//! connection) cuts the file back to the limit. (A `RESTART` checkpoint from the thread's own
//! connection waits for the write lock, which a writer that never pauses hands from one
//! transaction to the next without letting it in.) A reader that holds an older snapshot
//! keeps the WAL from starting again: the checkpoint waits for it at most [`RESTART_WAIT`]
//! (the store's own reads take a few milliseconds), holding the writer back that long, and
//! the next one waits a pause that doubles from [`FIRST_PAUSE`] to [`LAST_PAUSE`] while such
//! a reader (a long report, a forgotten transaction) stays.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rusqlite::Connection;

const EVERY: Duration = Duration::from_millis(200);

/// The WAL's size past which a checkpoint holds the writer back until it has copied every
/// frame, and the size its file is cut back to once it starts again (`journal_size_limit`).
pub(crate) const WAL_LIMIT: u64 = 64 << 20;

/// How long a `RESTART` checkpoint waits for readers of older snapshots, the writer held back.
const RESTART_WAIT: Duration = Duration::from_millis(20);

/// After a `RESTART` checkpoint that a reader held back, the next waits this long, and twice
/// as long after each one held back since, up to [`LAST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// The longest pause between `RESTART` checkpoints that readers hold back.
const LAST_PAUSE: Duration = Duration::from_secs(64);

/// What one [`step`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A passive checkpoint: it copied what it could.
    Passive,
    /// The WAL had passed the limit: every frame was copied, the writer held back meanwhile.
    Restarted,
    /// The WAL had passed the limit, but a reader of an older snapshot kept it from starting
    /// again.
    Held,
}

/// A passive checkpoint on `conn`; then, when the WAL holds more than `limit` bytes, a
/// `RESTART` checkpoint on the `writer`'s connection, which no write can use meanwhile.
pub(crate) fn step(
    conn: &Connection,
    writer: &Mutex<Connection>,
    limit: u64,
) -> rusqlite::Result<Step> {
    // (busy, frames in the WAL, frames copied)
    let frames: i64 = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    if (frames.max(0) as u64) * (page.max(0) as u64) <= limit {
        return Ok(Step::Passive);
    }
    let writer = writer.lock().unwrap_or_else(|e| e.into_inner());
    writer.busy_timeout(RESTART_WAIT)?;
    let busy = writer.query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| r.get::<_, i64>(0));
    writer.busy_timeout(crate::BUSY_TIMEOUT)?;
    match busy? {
        0 => Ok(Step::Restarted),
        _ => Ok(Step::Held),
    }
}

/// Runs checkpoints until dropped (the last store handle going away).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: Arc<AtomicBool>,
}

impl Checkpointer {
    /// Checkpoints the database at `path`, whose writes go through `writer`.
    pub(crate) fn start(path: &Path, writer: Weak<Mutex<Connection>>) -> Checkpointer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("sked-checkpoint".into())
            .spawn(move || {
                let conn = match Connection::open(&path) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot open the database for checkpoints");
                        return;
                    }
                };
                let _ = conn.busy_timeout(Duration::from_secs(1));
                let _ = conn.execute_batch(&format!(
                    "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = {WAL_LIMIT};"
                ));
                let (mut paused_until, mut pause) = (Instant::now(), FIRST_PAUSE);
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EVERY);
                    let Some(writer) = writer.upgrade() else {
                        break;
                    };
                    let limit = match Instant::now() < paused_until {
                        true => u64::MAX,
                        false => WAL_LIMIT,
                    };
                    match step(&conn, &writer, limit) {
                        Ok(Step::Held) => {
                            paused_until = Instant::now() + pause;
                            pause = (pause * 2).min(LAST_PAUSE);
                        }
                        Ok(Step::Restarted) => pause = FIRST_PAUSE,
                        Ok(Step::Passive) => {}
                        Err(e) => tracing::debug!(error = %e, "checkpoint skipped"),
                    }
                }
                // A last full checkpoint keeps the WAL small for the next start.
                let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            })
            .expect("spawning the checkpoint thread");
        Checkpointer { stop }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL past the limit is copied whole, and the next commit writes it from its start,
    /// its file cut back to the limit; one under the limit is left to passive checkpoints.
    #[test]
    fn a_wal_past_the_limit_starts_again_and_is_cut_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal.db");
        let limit: u64 = 256 << 10;
        let writer = Mutex::new(Connection::open(&path).unwrap());
        let conn = writer.lock().unwrap();
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
                 PRAGMA journal_size_limit = {limit};
                 CREATE TABLE t (v BLOB NOT NULL);"
        ))
        .unwrap();
        let checkpointer = Connection::open(&path).unwrap();
        let wal = || {
            std::fs::metadata(dir.path().join("wal.db-wal"))
                .unwrap()
                .len()
        };
        drop(conn);
        let write = |rows: usize| {
            let conn = writer.lock().unwrap();
            let tx = conn.unchecked_transaction().unwrap();
            for _ in 0..rows {
                tx.execute("INSERT INTO t (v) VALUES (zeroblob(4000))", [])
                    .unwrap();
            }
            tx.commit().unwrap();
        };
        write(10);
        assert_eq!(step(&checkpointer, &writer, limit).unwrap(), Step::Passive);
        // Commits with no checkpoint between them, as under a writer that never pauses, whose
        // commits a passive checkpoint never catches up with: the WAL grows past the limit.
        for _ in 0..8 {
            write(50);
        }
        assert!(wal() > 4 * limit, "{} bytes", wal());
        assert_eq!(
            step(&checkpointer, &writer, limit).unwrap(),
            Step::Restarted
        );
        write(1);
        assert!(wal() <= limit, "{} bytes", wal());
        // A reader of an older snapshot keeps it from starting again, and holds the
        // checkpoint back only briefly.
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        for _ in 0..8 {
            write(50);
        }
        let started = Instant::now();
        assert_eq!(step(&checkpointer, &writer, limit).unwrap(), Step::Held);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        reader.execute_batch("COMMIT").unwrap();
        write(1);
        assert_eq!(
            step(&checkpointer, &writer, limit).unwrap(),
            Step::Restarted
        );
        write(1);
        assert!(wal() <= limit, "{} bytes", wal());
        let rows: i64 = checkpointer
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 813);
    }
}
