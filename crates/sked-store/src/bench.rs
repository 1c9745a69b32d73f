//! What benchmarks (`sked bench`) read and do beside the store's operations, behind the `bench`
//! feature so that a build without it links none of it. sked itself never uses it.
//!
//! The ceiling of a database for queue work is the bare SQL a queue cannot do without, run on
//! the same database with the store's settings, so that a benchmark of sked can say how close
//! it comes to what the database itself can do (machines differ by 2–3×; a ratio measured in
//! the same run does not).
//!
//! The bare queue is one table of its own (created for the run, dropped after) with the columns
//! a queue needs to claim in order: `id`, `queue`, `kind`, `payload` (JSON), `priority`,
//! `run_at`, `state`, and one partial index of available rows in claim order
//! (`priority DESC, run_at, id`). No history, no attempts, no leases, no announcements.
//!
//! A queue that keeps each task's outcome, as sked does, cannot delete a finished row: it
//! writes the outcome instead, and retention must find finished rows by age. The kept drain
//! ([`CeilingWorkload::DrainKept`]) is that bare loop, a second ceiling beside the first, so
//! that a benchmark can also say how close sked comes to the least its own promise writes.

use async_trait::async_trait;

use crate::Result;

/// What a ceiling run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CeilingWorkload {
    /// `n` rows inserted first (not timed); then each client loops: claim up to `batch`
    /// available rows with one `UPDATE … RETURNING id` (one transaction), delete them (a second
    /// transaction), until none are left.
    Drain,
    /// As [`CeilingWorkload::Drain`], but a claimed row is marked `succeeded` with its finish
    /// time (the second transaction, one statement as the delete is) instead of deleted. The
    /// table has one more column, `finished_at`, and one more partial index, of succeeded
    /// rows by finish time, as retention needs to remove the oldest first.
    DrainKept,
    /// `n` rows inserted in transactions of `batch` rows, by `clients` connections at once.
    Insert,
}

/// A ceiling run.
#[derive(Debug, Clone, Copy)]
pub struct CeilingParams {
    /// What to measure.
    pub workload: CeilingWorkload,
    /// Rows.
    pub n: usize,
    /// Rows per claim or per insert transaction.
    pub batch: usize,
    /// Connections working at once (SQLite has one writer: it uses one).
    pub clients: usize,
}

/// What a ceiling run measured.
#[derive(Debug, Clone, Copy)]
pub struct CeilingReport {
    /// Wall time of the timed part, in seconds.
    pub secs: f64,
    /// Rows it handled (claimed and deleted or ended, or inserted).
    pub rows: usize,
}

impl CeilingReport {
    /// Rows a second.
    pub fn per_s(&self) -> f64 {
        self.rows as f64 / self.secs.max(1e-9)
    }
}

/// A backend's hooks for `sked bench`, beside its [`crate::Store`].
#[async_trait]
pub trait Bench: Send + Sync {
    /// Finishes deferred background work (for SQLite, copying the WAL into the database file)
    /// so that a measurement starts from a steady state.
    async fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// The database's own counters and commands, when the backend offers them.
    fn diagnostics(&self) -> Option<&dyn Diagnostics> {
        None
    }

    /// Runs `p` on the bare queue table (created before, dropped after).
    async fn ceiling(&self, p: CeilingParams) -> Result<CeilingReport>;

    /// Opens a read transaction on a connection of its own and keeps its snapshot until
    /// [`HeldSnapshot::release`]: what a long report or a forgotten `BEGIN` does to a queue
    /// (on PostgreSQL vacuum cannot remove the rows changed meanwhile; on SQLite checkpoints
    /// cannot pass it and the WAL grows).
    async fn hold_snapshot(&self) -> Result<Box<dyn HeldSnapshot>>;

    /// How big the task tables are now (for `sked bench soak`, to see growth).
    async fn sizes(&self) -> Result<TableSizes>;
}

/// The size of the task tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct TableSizes {
    /// Task rows kept, finished ones included.
    pub tasks: u64,
    /// Bytes on disk: on PostgreSQL the task and attempt tables with their indexes and TOAST;
    /// on SQLite the database file and its WAL.
    pub bytes: u64,
}

/// A snapshot held open by [`Bench::hold_snapshot`].
#[async_trait]
pub trait HeldSnapshot: Send {
    /// Ends the transaction that holds it.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// The payload of bare row `i`: what `sked bench` gives its no-op tasks.
pub fn payload(i: usize) -> serde_json::Value {
    serde_json::json!({ "i": i })
}

/// A database's own counters and commands, for benchmarks: kept in the backend so that no SQL
/// lives outside the store crates.
#[async_trait]
pub trait Diagnostics: Send + Sync {
    /// Store operations this process has run (each one or a few statements).
    fn operations(&self) -> u64;

    /// Transactions the database server has committed or rolled back, all sessions together.
    /// Servers publish these counters with a delay (PostgreSQL: up to about 10 s for an idle
    /// session), so measure over minutes.
    async fn server_transactions(&self) -> Result<i64>;

    /// Reclaims dead rows of the task table now, as autovacuum would soon after.
    async fn vacuum_tasks(&self) -> Result<()>;

    /// Counts every kept task per queue and state with one unbounded `GROUP BY`: what reading
    /// the queue counts cost before they were bounded. Returns the number of groups.
    async fn count_tasks_unbounded(&self) -> Result<u64>;
}
