//! WAL checkpoints on a thread of their own, so that no commit pays for copying the WAL back
//! into the database file (automatic checkpoints are off on the main connection).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;

const EVERY: Duration = Duration::from_millis(200);

/// Runs checkpoints until dropped (the last store handle going away).
#[derive(Debug)]
pub(crate) struct Checkpointer {
    stop: Arc<AtomicBool>,
}

impl Checkpointer {
    pub(crate) fn start(path: &Path) -> Checkpointer {
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
                let _ = conn.execute_batch("PRAGMA synchronous = FULL");
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EVERY);
                    // PASSIVE never blocks writers; it copies what it can.
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!(error = %e, "checkpoint skipped");
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
