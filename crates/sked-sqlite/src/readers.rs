//! Connections that only read, beside the writer's. WAL lets them read while the writer
//! writes, so every read of the store runs on one of them: reads neither wait for a write and
//! its sync to disk nor take the writer's time, which a drain needs whole (its writer is busy
//! nearly all the time). Each read runs in a read transaction of its own, so that all its
//! statements see one snapshot; it sees every write whose answer came before it began.
//!
//! Connections are opened as reads need them, up to a number at once, and kept for the next
//! reads.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use sked_store::{Result, StoreError};
use tokio::sync::Semaphore;

use crate::codec::db_err;

/// The store's reads running at once; more wait for one to end. Two keep a client's read from
/// waiting behind another's long one without letting readers that poll without pause take
/// every core from the writer (BENCHMARKS.md, "reads beside the writer").
pub(crate) const MAX_READERS: usize = 2;

pub(crate) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    room: Arc<Semaphore>,
}

impl Readers {
    pub(crate) fn new(path: PathBuf, max: usize) -> Readers {
        Readers {
            path,
            idle: Mutex::default(),
            room: Arc::new(Semaphore::new(max)),
        }
    }

    /// Runs `f` in a read transaction on a reader's connection, on a blocking thread.
    pub(crate) async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let permit = self
            .room
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut conn = match this.take() {
                Some(conn) => conn,
                None => crate::connect_reader(&this.path)?,
            };
            let tx = conn.transaction().map_err(db_err)?;
            let out = f(&tx);
            // A read transaction ends the same by either word; a connection that cannot end
            // one is not kept.
            tx.rollback().map_err(db_err)?;
            this.idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(conn);
            out
        })
        .await
        .map_err(|e| StoreError::Backend(format!("store thread failed: {e}")))?
    }

    fn take(&self) -> Option<Connection> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Connections kept for the next reads.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.idle.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    fn count(conn: &Connection) -> Result<i64> {
        conn.query_row("SELECT count(*) FROM queues", [], |r| r.get(0))
            .map_err(db_err)
    }

    fn add_queue(conn: &Connection, name: &str) {
        conn.execute(
            "INSERT INTO queues (name, updated_at) VALUES (?1, 0)",
            [name],
        )
        .unwrap();
    }

    #[tokio::test]
    async fn a_read_sees_one_snapshot_while_the_writer_commits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sked.db");
        drop(crate::SqliteStore::open(&path).unwrap());
        let writer = crate::connect(&path).unwrap();
        add_queue(&writer, "a");
        let readers = Arc::new(Readers::new(path, MAX_READERS));
        let (read_once, first_read) = mpsc::channel();
        let (wrote, written) = mpsc::channel::<()>();
        let read = readers.read(move |conn| {
            let before = count(conn)?;
            read_once.send(()).unwrap();
            written.recv().unwrap();
            Ok((before, count(conn)?))
        });
        let write = tokio::task::spawn_blocking(move || {
            first_read.recv().unwrap();
            add_queue(&writer, "b");
            wrote.send(()).unwrap();
            writer
        });
        let (counts, writer) = tokio::join!(read, write);
        assert_eq!(
            counts.unwrap(),
            (1, 1),
            "the read's statements saw one snapshot"
        );
        drop(writer);
        // The next read begins after the commit and sees it, on the connection kept.
        assert_eq!(readers.read(count).await.unwrap(), 2);
        assert_eq!(readers.kept(), 1);
    }

    /// Every read of the store answers while a write transaction holds the writer, and does
    /// not see that write.
    #[tokio::test]
    async fn reads_do_not_wait_for_the_writer() {
        use sked_store::*;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::SqliteStore::open(dir.path().join("sked.db")).unwrap();
        let now = jiff::Timestamp::now();
        let id = store
            .task_insert_many(TaskInsertParams {
                tasks: vec![TaskInsert::from(sked_core::NewTask::new("k"))],
                now,
            })
            .await
            .unwrap()[0]
            .id;
        store
            .queue_update(QueueUpdateParams {
                name: "default".into(),
                paused: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        let (held, hold) = mpsc::channel::<()>();
        let (begun, has_begun) = mpsc::channel();
        let conn = store.conn.clone();
        let writer = std::thread::spawn(move || {
            let conn = conn.lock().unwrap();
            conn.execute_batch("BEGIN IMMEDIATE; UPDATE queues SET paused = 0; DELETE FROM tasks;")
                .unwrap();
            begun.send(()).unwrap();
            hold.recv().unwrap();
            conn.execute_batch("ROLLBACK").unwrap();
        });
        has_begun.recv().unwrap();
        let reads = async {
            let task = store.task_get(id).await.unwrap();
            let tasks = store
                .task_list(TaskListParams {
                    limit: 10,
                    ..Default::default()
                })
                .await
                .unwrap();
            let counted = store
                .task_bulk_count(BulkFilter {
                    states: vec![sked_core::TaskState::Available],
                    ..Default::default()
                })
                .await
                .unwrap();
            store.task_next_run_at().await.unwrap();
            let queue = store.queue_get("default", now).await.unwrap();
            let queues = store
                .queue_list(QueueListParams {
                    after: None,
                    limit: 10,
                    count_limit: 10,
                    now,
                })
                .await
                .unwrap();
            store
                .queue_key_usage(keyed::KeyUsageParams {
                    queue: "default".into(),
                    key: "a".into(),
                    since: now,
                    strict: true,
                })
                .await
                .unwrap();
            store.lease_get("leader", now).await.unwrap();
            assert!(store.schedule_get("none").await.is_err());
            store
                .schedule_list(ScheduleListParams {
                    after: None,
                    limit: 10,
                    with_payloads: false,
                    filter: Default::default(),
                })
                .await
                .unwrap();
            store
                .schedule_due(ScheduleDueParams { now, limit: 10 })
                .await
                .unwrap();
            store
                .occurrence_list(OccurrenceListParams {
                    schedule: "none".into(),
                    limit: 10,
                })
                .await
                .unwrap();
            store.schedule_next_fire_at().await.unwrap();
            store
                .activity(ActivityParams {
                    since: now,
                    bucket: jiff::SignedDuration::from_secs(60),
                })
                .await
                .unwrap();
            store
                .worker_list(WorkerListParams {
                    seen_since: now,
                    limit: 10,
                })
                .await
                .unwrap();
            (task, tasks.items.len(), counted, queue, queues.items.len())
        };
        let (task, listed, counted, queue, queues) =
            tokio::time::timeout(Duration::from_secs(5), reads)
                .await
                .expect("reads answered while a write transaction held the writer");
        // None of them saw the write in progress.
        assert_eq!(task.id, id);
        assert_eq!((listed, counted), (1, 1));
        assert!(queue.paused);
        assert_eq!(queues, 1);
        held.send(()).unwrap();
        writer.join().unwrap();
    }

    #[tokio::test]
    async fn reads_at_once_open_at_most_the_readers_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sked.db");
        drop(crate::SqliteStore::open(&path).unwrap());
        let readers = Arc::new(Readers::new(path, MAX_READERS));
        let reads: Vec<_> = (0..3 * MAX_READERS)
            .map(|_| {
                let readers = readers.clone();
                tokio::spawn(async move {
                    readers
                        .read(|conn| {
                            std::thread::sleep(Duration::from_millis(20));
                            count(conn)
                        })
                        .await
                })
            })
            .collect();
        for read in reads {
            assert_eq!(read.await.unwrap().unwrap(), 0);
        }
        let kept = readers.kept();
        assert!((1..=MAX_READERS).contains(&kept), "{kept} connections kept");
    }
}
