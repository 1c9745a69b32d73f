//! Group commit: writes that wait while the connection is busy share one transaction, and so one
//! `fsync`, when their turn comes.
//!
//! Each write is queued, and a blocking thread is started for it. The first thread to get the
//! connection takes every queued write (up to [`MAX_GROUP`]), runs each inside a savepoint of one
//! `BEGIN IMMEDIATE` transaction, commits, and answers them; a thread that finds its write taken
//! already has nothing to do. A caller waits for its answer, not for its thread. A write
//! that fails is rolled back to its savepoint alone, so it changes nothing and the
//! others stand. Every answer is sent only after the commit has returned, so an `Ok` still means
//! the change is on disk, and a failed commit fails every write of its group. An uncontended
//! write is a group of one and runs as before, without a savepoint.

use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, Transaction, TransactionBehavior};
use sked_store::{Result, StoreError};
use tokio::sync::oneshot;

/// At most this many writes share a transaction: a group's writes wait for its commit.
pub(crate) const MAX_GROUP: usize = 64;

/// A queued write.
trait Write: Send {
    /// Runs the write in `tx`; what it did, to be answered once the transaction has ended.
    fn run(self: Box<Self>, tx: &Transaction<'_>) -> Box<dyn Answer>;
    /// Answers without running.
    fn fail(self: Box<Self>, e: StoreError);
}

/// A write's outcome, not yet sent.
trait Answer: Send {
    fn ok(&self) -> bool;
    /// Sends the outcome, or `failed` in place of a success when the transaction did not commit.
    fn send(self: Box<Self>, failed: Option<&str>);
}

struct Job<T, F> {
    f: F,
    reply: oneshot::Sender<Result<T>>,
}

struct Outcome<T> {
    out: Result<T>,
    reply: oneshot::Sender<Result<T>>,
}

impl<T, F> Write for Job<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
{
    fn run(self: Box<Self>, tx: &Transaction<'_>) -> Box<dyn Answer> {
        Box::new(Outcome {
            out: (self.f)(tx),
            reply: self.reply,
        })
    }

    fn fail(self: Box<Self>, e: StoreError) {
        let _ = self.reply.send(Err(e));
    }
}

impl<T: Send + 'static> Answer for Outcome<T> {
    fn ok(&self) -> bool {
        self.out.is_ok()
    }

    fn send(self: Box<Self>, failed: Option<&str>) {
        let out = match (self.out, failed) {
            (Ok(_), Some(why)) => Err(not_committed(why)),
            (out, _) => out,
        };
        let _ = self.reply.send(out);
    }
}

fn not_committed(why: &str) -> StoreError {
    StoreError::Unavailable(format!("the write was not committed: {why}"))
}

/// The writes waiting for the connection.
#[derive(Default)]
pub(crate) struct Queue(Mutex<Vec<Box<dyn Write>>>);

impl Queue {
    /// Queues `f`; its answer arrives once a [`Queue::run`] has run and committed it. The
    /// caller starts a thread for a `run`.
    pub(crate) fn push<T, F>(&self, f: F) -> oneshot::Receiver<Result<T>>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.lock().push(Box::new(Job { f, reply }));
        answer
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Box<dyn Write>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Once it has the connection, runs the queued writes, up to [`MAX_GROUP`], as one group.
    pub(crate) fn run(&self, conn: &Mutex<Connection>) {
        let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
        let writes: Vec<Box<dyn Write>> = {
            let mut queued = self.lock();
            let n = queued.len().min(MAX_GROUP);
            queued.drain(..n).collect()
        };
        if !writes.is_empty() {
            run_group(&mut conn, writes);
        }
    }
}

fn run_group(conn: &mut Connection, writes: Vec<Box<dyn Write>>) {
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            for w in writes {
                w.fail(StoreError::Unavailable(format!(
                    "cannot begin a write: {e}"
                )));
            }
            return;
        }
    };
    let alone = writes.len() == 1;
    let mut answers: Vec<Box<dyn Answer>> = Vec::with_capacity(writes.len());
    let mut broken = None;
    let mut writes = writes.into_iter();
    for w in writes.by_ref() {
        if alone {
            answers.push(w.run(&tx));
            continue;
        }
        let (answer, lost) = savepoint(&tx, w);
        answers.push(answer);
        if lost.is_some() {
            broken = lost;
            break;
        }
    }
    if let Some(why) = broken {
        // The transaction is gone (SQLite rolls back on some errors, such as a full disk): none
        // of the group's writes stands.
        drop(tx);
        for a in answers {
            a.send(Some(&why));
        }
        for w in writes {
            w.fail(not_committed(&why));
        }
        return;
    }
    let failed = match answers.iter().any(|a| a.ok()) {
        true => tx.commit().err().map(|e| e.to_string()),
        // Nothing to keep: a lone write that failed is rolled back whole, as before.
        false => tx.rollback().err().map(|e| e.to_string()),
    };
    for a in answers {
        a.send(failed.as_deref());
    }
}

/// Runs `w` inside a savepoint, rolled back when it fails; with why, when the transaction
/// itself was lost.
fn savepoint(tx: &Transaction<'_>, w: Box<dyn Write>) -> (Box<dyn Answer>, Option<String>) {
    let step = |sql: &str| tx.execute_batch(sql).map_err(|e| e.to_string());
    if let Err(why) = step("SAVEPOINT sked_write") {
        w.fail(not_committed(&why));
        return (Box::new(Failed), Some(why));
    }
    let answer = w.run(tx);
    let lost = if answer.ok() {
        step("RELEASE sked_write").err()
    } else if tx.is_autocommit() {
        Some("the transaction was rolled back by an error".to_string())
    } else {
        step("ROLLBACK TO sked_write")
            .and_then(|()| step("RELEASE sked_write"))
            .err()
    };
    (answer, lost)
}

/// The answer of a write already answered.
struct Failed;

impl Answer for Failed {
    fn ok(&self) -> bool {
        false
    }

    fn send(self: Box<Self>, _: Option<&str>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &tempfile::TempDir) -> Mutex<Connection> {
        let conn = Connection::open(dir.path().join("group.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (v INTEGER NOT NULL);")
            .unwrap();
        Mutex::new(conn)
    }

    /// A write that inserts `v` and then fails when `fail` is set.
    fn insert(v: i64, fail: bool) -> impl FnOnce(&Transaction<'_>) -> Result<i64> + Send {
        move |tx| {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [v]).unwrap();
            match fail {
                true => Err(StoreError::Invalid(format!("write {v} fails"))),
                false => Ok(v),
            }
        }
    }

    fn values(conn: &Mutex<Connection>) -> Vec<i64> {
        let conn = conn.lock().unwrap();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    #[test]
    fn a_group_keeps_its_successes_and_rolls_back_each_failure_alone() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir);
        let queue = Queue::default();
        let n = MAX_GROUP as i64 + 6;
        let mut answers = Vec::new();
        for v in 0..n {
            answers.push(queue.push(insert(v, v % 3 == 1)));
        }
        // The first thread takes a full group; the rest are left for the next.
        queue.run(&conn);
        assert_eq!(queue.lock().len(), n as usize - MAX_GROUP);
        queue.run(&conn);
        queue.run(&conn);
        for (v, mut answer) in (0..n).zip(answers) {
            match answer.try_recv().unwrap() {
                Ok(got) => assert_eq!((got, v % 3), (v, v % 3)),
                Err(e) => {
                    assert_eq!(v % 3, 1);
                    assert_eq!(e.to_string(), format!("invalid input: write {v} fails"));
                }
            }
        }
        let kept: Vec<i64> = (0..n).filter(|v| v % 3 != 1).collect();
        assert_eq!(values(&conn), kept);
    }

    #[test]
    fn a_lone_write_that_fails_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir);
        let queue = Queue::default();
        let mut answer = queue.push(insert(7, true));
        queue.run(&conn);
        assert!(answer.try_recv().unwrap().is_err());
        assert_eq!(values(&conn), Vec::<i64>::new());
    }

    #[test]
    fn a_group_that_cannot_begin_fails_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir);
        conn.lock()
            .unwrap()
            .busy_timeout(std::time::Duration::ZERO)
            .unwrap();
        // Another connection's write lock: the group cannot begin.
        let other = Connection::open(dir.path().join("group.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let queue = Queue::default();
        let answers: Vec<_> = (0..3).map(|v| queue.push(insert(v, false))).collect();
        queue.run(&conn);
        for mut answer in answers {
            let e = answer.try_recv().unwrap().unwrap_err();
            assert_eq!(e.kind(), sked_store::ErrorKind::Unavailable, "{e}");
        }
        other.execute_batch("ROLLBACK").unwrap();
        assert_eq!(values(&conn), Vec::<i64>::new());
    }
}
