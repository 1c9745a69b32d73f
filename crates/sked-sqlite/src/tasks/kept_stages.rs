//! A large stage of a workflow kept until it is released, in parts that claims take
//! (docs/decisions/0027-kept-stages-on-sqlite.md): a run of tasks that all wait for one wait
//! and share every column but the payload goes in as parts of at most [`Keeping::part`] tasks,
//! each a row of `stages` that holds a run of ids taken from the tasks' sequence.
//!
//! Its wait's release marks the parts released when claims may take them (they are due and
//! their queue has no limit), and makes the others' rows, which the release then moves as it
//! moves any row; its cancel makes the rows, which the cancel then ends. Claims take a released
//! part's next tasks in claim order with the available rows, and insert them running
//! ([`take`]); the part keeps the rest. Anything else that reads or changes tasks by id or by
//! filter makes the rows it may meet first ([`make`]): waiting, or available for a released
//! part's rest, as the rows would have been all along. Counts read a part's tasks as waiting
//! or, released, available.
//!
//! One writer: no part is ever taken by two claims at once, and needs no lock of its own.

use std::sync::LazyLock;

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, ToSql, params};
use serde_json::value::RawValue;
use sked_core::{TaskId, WorkflowId};
use sked_store::kept::{KEPT_PAYLOAD_BYTES, Keeping};
use sked_store::{Result, StoreError};

use super::STATEMENT_ROWS;
use crate::codec::{db_err, id_list, ts};

/// The tasks whose kept parts a read or a change makes rows first.
#[derive(Clone, Debug)]
pub(crate) enum Kept {
    /// The tasks of these ids.
    Ids(Vec<TaskId>),
    /// A task, its stage, and its parents' and children's (a task read with its family, or
    /// a change that may reach them).
    Family(TaskId),
    /// The tasks of a workflow.
    Workflow(WorkflowId),
    /// The tasks of a wait, by its id (its cancel).
    Wait(i64),
    /// The released tasks of a queue if it has a limit: its claims walk rows.
    ReleasedIfLimited(String),
    /// Every task (a read or a change by filter).
    All,
}

/// The parts that hold tasks of `which`, by id.
pub(crate) fn touched(conn: &Connection, which: &Kept) -> Result<Vec<i64>> {
    let any: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM stages)")
        .map_err(db_err)?
        .query_row([], |r| r.get(0))
        .map_err(db_err)?;
    if !any {
        return Ok(Vec::new());
    }
    let (sql, value): (&str, Option<Box<dyn ToSql>>) = match which {
        Kept::Ids(ids) => (
            "SELECT DISTINCT s.id FROM stages s JOIN rarray(?1) x \
               ON x.value BETWEEN s.id + s.taken AND s.id + s.size - 1",
            Some(Box::new(id_list(ids))),
        ),
        Kept::Family(id) => (FAMILY, Some(Box::new(*id))),
        Kept::Workflow(w) => (
            "SELECT s.id FROM workflows w JOIN stages s \
               ON s.id BETWEEN w.first_task AND w.last_task WHERE w.id = ?1",
            Some(Box::new(*w)),
        ),
        Kept::Wait(w) => ("SELECT id FROM stages WHERE wait = ?1", Some(Box::new(*w))),
        Kept::ReleasedIfLimited(queue) => {
            (RELEASED_IF_LIMITED.as_str(), Some(Box::new(queue.clone())))
        }
        Kept::All => ("SELECT id FROM stages", None),
    };
    let mut stmt = conn.prepare_cached(sql).map_err(db_err)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(value), |r| r.get(0))
        .map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}

/// The released parts of the queue `?1` when it has a limit.
static RELEASED_IF_LIMITED: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT id FROM stages WHERE released AND queue = ?1 \
           AND EXISTS (SELECT 1 FROM queues q WHERE q.name = ?1 AND {})",
        sked_store::keyed::LIMITED
    )
});

/// The parts of task `?1`'s family: those of its own wait (its stage), of the waits that wait
/// for it or for its stage (its children), of the stages its wait waits for whole, and those
/// that hold a parent its wait names (its parents). Its wait is its row's or, kept, its part's.
const FAMILY: &str = "WITH own(wait) AS ( \
      SELECT wait FROM tasks WHERE id = ?1 AND wait IS NOT NULL \
      UNION SELECT wait FROM stages WHERE ?1 BETWEEN id AND id + size - 1), \
    near(wait) AS ( \
      SELECT wait FROM own \
      UNION SELECT wait FROM wait_parents WHERE parent = ?1 \
      UNION SELECT ws.wait FROM wait_stages ws JOIN own o ON ws.stage = o.wait \
      UNION SELECT ws.stage FROM wait_stages ws JOIN own o ON ws.wait = o.wait) \
    SELECT s.id FROM stages s WHERE s.wait IN (SELECT wait FROM near) \
    UNION SELECT s.id FROM stages s JOIN wait_parents p \
      ON p.parent BETWEEN s.id + s.taken AND s.id + s.size - 1 \
    WHERE p.wait IN (SELECT wait FROM own)";

/// Makes the rows of the parts that hold tasks of `which`, as they would have been all along.
pub(crate) fn make(conn: &Connection, which: &Kept) -> Result<()> {
    for part in touched(conn, which)? {
        make_part(conn, part)?;
    }
    Ok(())
}

/// A part of a kept stage, as [`PART`] reads it.
struct Part {
    id: i64,
    wait: i64,
    size: i64,
    taken: i64,
    released: bool,
    payloads: String,
    queue: String,
    kind: String,
    priority: i32,
    run_at: i64,
    max_attempts: i32,
    created_at: i64,
}

const PART: &str = "SELECT id, wait, size, taken, released, payloads, queue, kind, priority, \
    run_at, max_attempts, created_at FROM stages WHERE id = ?1";

fn part(conn: &Connection, id: i64) -> Result<Option<Part>> {
    conn.prepare_cached(PART)
        .map_err(db_err)?
        .query_row([id], |r| {
            Ok(Part {
                id: r.get(0)?,
                wait: r.get(1)?,
                size: r.get(2)?,
                taken: r.get(3)?,
                released: r.get(4)?,
                payloads: r.get(5)?,
                queue: r.get(6)?,
                kind: r.get(7)?,
                priority: r.get(8)?,
                run_at: r.get(9)?,
                max_attempts: r.get(10)?,
                created_at: r.get(11)?,
            })
        })
        .optional()
        .map_err(db_err)
}

/// Makes the rows of the part `id` not taken yet (waiting, or available once released), and
/// forgets the part.
fn make_part(conn: &Connection, id: i64) -> Result<()> {
    let Some(p) = part(conn, id)? else {
        return Ok(());
    };
    let state = match p.released {
        true => "available",
        false => "waiting",
    };
    insert_rows(conn, &p, p.size as usize, state, None)?;
    conn.prepare_cached("DELETE FROM stages WHERE id = ?1")
        .map_err(db_err)?
        .execute([id])
        .map_err(db_err)?;
    Ok(())
}

/// A lease written into the rows a claim takes from a part: its worker, start and end.
pub(crate) struct Lease<'a> {
    pub(crate) worker: &'a str,
    pub(crate) now: Timestamp,
    pub(crate) expires: Timestamp,
}

/// The values the rows of a part share, then per row its id and payload.
const SHARED: usize = 12;

/// `INSERT INTO tasks (…) VALUES …` of `rows` rows of a part: `?1`–`?12` the values they share
/// (queue, kind, priority, state, run time, attempts allowed, creation time, wait, attempt,
/// start, lease end, worker), then an id and a payload a row.
fn insert_sql(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let (id, payload) = (SHARED + 2 * r + 1, SHARED + 2 * r + 2);
            format!("(?{id}, ?1, ?2, ?{payload}, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")
        })
        .collect();
    format!(
        "INSERT OR FAIL INTO tasks (id, queue, kind, payload, priority, state, run_at, \
           max_attempts, created_at, wait, attempt, started_at, lease_expires_at, worker) \
         VALUES {}",
        values.join(", ")
    )
}

static INSERTS: LazyLock<[String; 4]> = LazyLock::new(|| STATEMENT_ROWS.map(insert_sql));

/// Inserts the rows of the part's tasks from `taken` up to `to` (exclusive), in `state`, with
/// `lease` when they are leased (a claim's), and notes them taken.
fn insert_rows(
    conn: &Connection,
    p: &Part,
    to: usize,
    state: &str,
    lease: Option<&Lease<'_>>,
) -> Result<()> {
    let payloads: Vec<&RawValue> = serde_json::from_str(&p.payloads)
        .map_err(|e| StoreError::Backend(format!("a kept part's payloads: {e}")))?;
    if payloads.len() != p.size as usize {
        return Err(StoreError::Backend(format!(
            "a kept part of {} tasks holds {} payloads",
            p.size,
            payloads.len()
        )));
    }
    let from = p.taken as usize;
    let (attempt, started, expires, worker) = match lease {
        Some(l) => (1, Some(ts(l.now)), Some(ts(l.expires)), Some(l.worker)),
        None => (0, None, None, None),
    };
    let shared: [&dyn ToSql; SHARED] = [
        &p.queue,
        &p.kind,
        &p.priority,
        &state,
        &p.run_at,
        &p.max_attempts,
        &p.created_at,
        &p.wait,
        &attempt,
        &started,
        &expires,
        &worker,
    ];
    let mut k = from;
    for (sql, size) in INSERTS.iter().zip(STATEMENT_ROWS) {
        while to - k >= size {
            let mut stmt = conn.prepare_cached(sql).map_err(db_err)?;
            for (i, v) in shared.iter().enumerate() {
                stmt.raw_bind_parameter(i + 1, v).map_err(db_err)?;
            }
            for r in 0..size {
                let id = p.id + (k + r) as i64;
                stmt.raw_bind_parameter(SHARED + 2 * r + 1, id)
                    .map_err(db_err)?;
                stmt.raw_bind_parameter(SHARED + 2 * r + 2, payloads[k + r].get())
                    .map_err(db_err)?;
            }
            stmt.raw_execute().map_err(db_err)?;
            k += size;
        }
    }
    Ok(())
}

/// The values a kept stage's tasks share, as the insert checked them.
pub(crate) struct Shared<'a> {
    pub(crate) queue: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) priority: i32,
    pub(crate) run_at: i64,
    pub(crate) max_attempts: i32,
    pub(crate) created_at: i64,
    pub(crate) wait: i64,
}

/// Whether payloads of these sizes go in as a kept stage of `keeping`: at least its fewest
/// tasks, and no more than [`KEPT_PAYLOAD_BYTES`] of JSON together.
pub(crate) fn keeps(payload_bytes: impl Iterator<Item = usize>, keeping: Keeping) -> bool {
    let Some(min) = keeping.min else {
        return false;
    };
    let (mut n, mut bytes) = (0usize, 0usize);
    for b in payload_bytes {
        n += 1;
        bytes += b + 1;
    }
    n >= min.max(1) && bytes <= KEPT_PAYLOAD_BYTES
}

/// Inserts a kept stage of tasks with `payloads` (JSON texts) that share `s`, in parts of at
/// most `keeping.part` (`None`: one part, not claimable); answers its tasks' first id. Its ids
/// follow the tasks' last one and are taken from the sequence, which AUTOINCREMENT never goes
/// back on: no later task gets one.
pub(crate) fn insert(
    conn: &Connection,
    s: &Shared<'_>,
    payloads: &[&str],
    keeping: Keeping,
) -> Result<TaskId> {
    let n = payloads.len() as i64;
    let last: i64 = conn
        .prepare_cached("SELECT seq FROM sqlite_sequence WHERE name = 'tasks'")
        .map_err(db_err)?
        .query_row([], |r| r.get(0))
        .optional()
        .map_err(db_err)?
        .unwrap_or(0);
    let moved = conn
        .prepare_cached("UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'tasks'")
        .map_err(db_err)?
        .execute([last + n])
        .map_err(db_err)?;
    if moved == 0 {
        conn.prepare_cached("INSERT INTO sqlite_sequence (name, seq) VALUES ('tasks', ?1)")
            .map_err(db_err)?
            .execute([last + n])
            .map_err(db_err)?;
    }
    let claimable = keeping.part.is_some();
    let part = keeping.part.unwrap_or(payloads.len()).max(1);
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO stages (id, wait, size, claimable, payloads, queue, kind, priority, \
               run_at, max_attempts, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .map_err(db_err)?;
    let mut text = String::new();
    for (k, chunk) in payloads.chunks(part).enumerate() {
        text.clear();
        text.push('[');
        text.push_str(&chunk.join(","));
        text.push(']');
        stmt.execute(params![
            last + 1 + (k * part) as i64,
            s.wait,
            chunk.len() as i64,
            claimable,
            text,
            s.queue,
            s.kind,
            s.priority,
            s.run_at,
            s.max_attempts,
            s.created_at,
        ])
        .map_err(db_err)?;
    }
    Ok(last + 1)
}

/// What the release of wait `wait` at `now` does to its kept parts: marks them released when
/// claims may take them (claimable, due, and in a queue without limits: the walk of a limited
/// queue reads rows only) and answers their run time; otherwise makes their rows, waiting,
/// for the release to move as it moves rows.
pub(crate) fn release(conn: &Connection, wait: i64, now: Timestamp) -> Result<Option<i64>> {
    let run_at: Option<i64> = conn
        .prepare_cached(&format!(
            "UPDATE stages SET released = 1 WHERE wait = ?1 AND claimable AND run_at <= ?2 \
               AND NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = stages.queue AND {}) \
             RETURNING run_at",
            sked_store::keyed::LIMITED
        ))
        .map_err(db_err)?
        .query_map(params![wait, ts(now)], |r| r.get::<_, i64>(0))
        .map_err(db_err)?
        .collect::<rusqlite::Result<Vec<i64>>>()
        .map_err(db_err)?
        .into_iter()
        .min();
    let rest: Vec<i64> = conn
        .prepare_cached("SELECT id FROM stages WHERE wait = ?1 AND NOT released")
        .map_err(db_err)?
        .query_map([wait], |r| r.get(0))
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?;
    for part in rest {
        make_part(conn, part)?;
    }
    Ok(run_at)
}

/// A released part as a claim sees it: its next task's key and how many it has left.
pub(crate) struct Released {
    pub(crate) id: i64,
    pub(crate) next: TaskId,
    pub(crate) left: i64,
    pub(crate) queue: String,
    pub(crate) kind: String,
    pub(crate) priority: i32,
    pub(crate) run_at: i64,
}

/// The released parts, in claim order.
pub(crate) fn released(conn: &Connection) -> Result<Vec<Released>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, id + taken, size - taken, queue, kind, priority, run_at FROM stages \
             WHERE released ORDER BY priority DESC, run_at, id",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(Released {
                id: r.get(0)?,
                next: r.get(1)?,
                left: r.get(2)?,
                queue: r.get(3)?,
                kind: r.get(4)?,
                priority: r.get(5)?,
                run_at: r.get(6)?,
            })
        })
        .map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}

/// Takes the next `n` tasks of the released part `id` for a claim: inserts them running with
/// `lease`, and keeps the rest (or forgets the part when none is left).
pub(crate) fn take(conn: &Connection, id: i64, n: usize, lease: &Lease<'_>) -> Result<()> {
    let Some(p) = part(conn, id)? else {
        return Err(StoreError::Backend(format!("a claim took part {id}, gone")));
    };
    let to = p.taken as usize + n;
    if !p.released || to > p.size as usize {
        return Err(StoreError::Backend(format!(
            "a claim took {n} tasks of part {id}, which has {} left",
            p.size - p.taken
        )));
    }
    insert_rows(conn, &p, to, "running", Some(lease))?;
    let sql = match to == p.size as usize {
        true => "DELETE FROM stages WHERE id = ?1 AND ?2 IS NOT NULL",
        false => "UPDATE stages SET taken = ?2 WHERE id = ?1",
    };
    conn.prepare_cached(sql)
        .map_err(db_err)?
        .execute(params![id, to as i64])
        .map_err(db_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};
    use sked_core::{NewTask, TaskState};
    use sked_store::kept::Keeping;
    use sked_store::{
        QueueUpdateParams, Store, TaskClaimParams, TaskInsertParams, WorkflowCreateParams,
        WorkflowTaskInsert,
    };

    use crate::SqliteStore;

    fn open(dir: &tempfile::TempDir, name: &str, keeping: Keeping) -> SqliteStore {
        SqliteStore::open_keeping(dir.path().join(name), keeping).unwrap()
    }

    /// How many parts the store holds, and how many of them are released.
    fn parts(store: &SqliteStore) -> (i64, i64) {
        let c = rusqlite::Connection::open(store.path()).unwrap();
        c.query_row(
            "SELECT count(*), count(*) FILTER (WHERE released) FROM stages",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    /// Tasks with rows, and those of them in `state`.
    fn rows(store: &SqliteStore, state: &str) -> (i64, i64) {
        let c = rusqlite::Connection::open(store.path()).unwrap();
        c.query_row(
            "SELECT count(*), count(*) FILTER (WHERE state = ?1) FROM tasks",
            [state],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    fn claim(queues: &[&str], kinds: &[&str], max: u32, now: Timestamp) -> TaskClaimParams {
        TaskClaimParams {
            queues: queues.iter().map(|q| q.to_string()).collect(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            max,
            min_priority: None,
            worker: "w".into(),
            lease_ttl: SignedDuration::from_secs(60),
            timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        }
    }

    /// A workflow of a root and a stage of `n` tasks of kind `kind` in `queue` after it.
    fn fan_out(queue: &str, kind: &str, n: usize, now: Timestamp) -> WorkflowCreateParams {
        let node = |name: String, after: Vec<usize>, kind: &str| WorkflowTaskInsert {
            insert: NewTask::new(kind)
                .queue(queue)
                .payload(serde_json::json!({ "n": name }))
                .into(),
            name,
            after,
        };
        let mut tasks = vec![node("root".into(), vec![], "root")];
        tasks.extend((1..=n).map(|i| node(format!("m{i}"), vec![0], kind)));
        WorkflowCreateParams {
            name: None,
            tasks,
            schedule: None,
            nominal_at: None,
            now,
        }
    }

    /// Makes the workflow [`fan_out`] and ends its root: its stage is released.
    async fn released(store: &SqliteStore, queue: &str, kind: &str, n: usize, now: Timestamp) {
        store
            .workflow_create(fan_out(queue, kind, n, now))
            .await
            .unwrap();
        end_root(store, queue, now).await;
    }

    /// Claims the root of a workflow [`fan_out`] made in `queue`, and ends it well.
    async fn end_root(store: &SqliteStore, queue: &str, now: Timestamp) {
        let root = store
            .task_claim(claim(&[queue], &["root"], 1, now))
            .await
            .unwrap();
        assert_eq!(root.len(), 1);
        let end = sked_store::TaskFinishParams {
            id: root[0].id,
            attempt: root[0].attempt,
            outcome: sked_store::FinishOutcome::Succeeded { result: None },
            now,
            jitter: 0.0,
        };
        store.task_finish_many(vec![end]).await.unwrap();
    }

    /// The shared run against the reference: a store that makes every task a row, one that
    /// keeps stages and makes their rows when released, and one whose claims take parts of
    /// three, through the same random workflows.
    #[tokio::test]
    async fn kept_stages_answer_as_rows_do() {
        let dir = tempfile::tempdir().unwrap();
        let rows = open(&dir, "rows.db", Keeping::default());
        let at_release = Keeping {
            min: Some(1),
            part: None,
        };
        let in_parts = Keeping {
            min: Some(1),
            part: Some(3),
        };
        let kept = [
            open(&dir, "at-release.db", at_release),
            open(&dir, "parts.db", in_parts),
        ];
        let stores: Vec<(&str, &dyn Store)> = vec![
            ("made rows when released", &kept[0]),
            ("taken by claims", &kept[1]),
        ];
        let count = async |k: usize| parts(&kept[k]);
        sked_store::conformance::kept_stages_answer_as_rows_do(&rows, &stores, count).await;
    }

    /// A stage kept goes in as parts with no rows, its ids taken; the next task takes the id
    /// after them. Released, claims take its tasks with their payloads, in id order, and the
    /// parts go once taken.
    #[tokio::test]
    async fn a_kept_stage_takes_its_ids_and_claims_take_its_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(
            &dir,
            "sked.db",
            Keeping {
                min: Some(2),
                part: Some(4),
            },
        );
        let now = Timestamp::now();
        let made = store
            .workflow_create(fan_out("default", "m", 10, now))
            .await
            .unwrap();
        assert_eq!(made.tasks, (1..=11).collect::<Vec<i64>>());
        assert_eq!(parts(&store), (3, 0), "ten tasks in parts of four");
        assert_eq!(rows(&store, "waiting"), (1, 0), "the root alone is a row");
        let next = store
            .task_insert_many(TaskInsertParams {
                tasks: vec![NewTask::new("other").into()],
                now,
            })
            .await
            .unwrap();
        assert_eq!(next[0].id, 12);
        end_root(&store, "default", now).await;
        assert_eq!(parts(&store), (3, 3), "released");
        let q = store.queue_get("default", now).await.unwrap();
        assert_eq!(q.counts.get(&TaskState::Available), Some(&11));
        let first = store.task_claim(claim(&[], &["m"], 5, now)).await.unwrap();
        let ids: Vec<i64> = first.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![2, 3, 4, 5, 6]);
        assert!(
            first
                .iter()
                .all(|t| t.state == TaskState::Running && t.attempt == 1)
        );
        assert_eq!(first[0].payload, serde_json::json!({ "n": "m1" }));
        assert_eq!(first[4].payload, serde_json::json!({ "n": "m5" }));
        assert_eq!(
            parts(&store),
            (2, 2),
            "the first part taken whole, one of the next"
        );
        let rest = store.task_claim(claim(&[], &[], 100, now)).await.unwrap();
        let ids: Vec<i64> = rest.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![7, 8, 9, 10, 11, 12]);
        assert_eq!(parts(&store), (0, 0));
    }

    /// A task of a kept stage named as a parent is made a row first: the new task waits for
    /// it, and its part's other tasks are rows too.
    #[tokio::test]
    async fn a_kept_task_can_be_named_as_a_parent() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(
            &dir,
            "sked.db",
            Keeping {
                min: Some(2),
                part: Some(1000),
            },
        );
        let now = Timestamp::now();
        let made = store
            .workflow_create(fan_out("default", "m", 5, now))
            .await
            .unwrap();
        assert_eq!(parts(&store), (1, 0));
        let parent = made.tasks[2];
        let child = store
            .task_insert_many(TaskInsertParams {
                tasks: vec![NewTask::new("after").after([parent]).into()],
                now,
            })
            .await
            .unwrap();
        assert_eq!(parts(&store), (0, 0));
        assert_eq!(
            rows(&store, "waiting"),
            (7, 6),
            "the stage's rows and the new task"
        );
        let t = store.task_get(child[0].id).await.unwrap();
        assert_eq!(t.state, TaskState::Waiting);
        assert_eq!(t.waiting_for, vec![parent]);
    }

    /// A queue given a limit has its released parts made rows, available: its claims walk
    /// rows, and take them within the limit.
    #[tokio::test]
    async fn a_queue_given_a_limit_makes_its_released_parts_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(
            &dir,
            "sked.db",
            Keeping {
                min: Some(2),
                part: Some(3),
            },
        );
        let now = Timestamp::now();
        released(&store, "q", "m", 7, now).await;
        assert_eq!(parts(&store), (3, 3));
        store
            .queue_update(QueueUpdateParams {
                name: "q".into(),
                concurrency_limit: Some(Some(2)),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(parts(&store), (0, 0));
        assert_eq!(rows(&store, "available"), (8, 7));
        let got = store.task_claim(claim(&[], &[], 10, now)).await.unwrap();
        assert_eq!(got.len(), 2, "the limit holds");
    }

    /// A claim takes only the released parts it may: of its queues and kinds, not of a paused
    /// queue; the others are left for claims that may.
    #[tokio::test]
    async fn claims_take_the_released_parts_of_their_queues_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(
            &dir,
            "sked.db",
            Keeping {
                min: Some(2),
                part: Some(3),
            },
        );
        let now = Timestamp::now();
        released(&store, "a", "ka", 4, now).await;
        released(&store, "b", "kb", 4, now).await;
        assert_eq!(parts(&store), (4, 4));
        let got = store.task_claim(claim(&["a"], &[], 10, now)).await.unwrap();
        assert!(got.len() == 4 && got.iter().all(|t| t.queue == "a"));
        let got = store
            .task_claim(claim(&[], &["ka"], 10, now))
            .await
            .unwrap();
        assert!(got.is_empty(), "no task of kind ka is left");
        store
            .queue_update(QueueUpdateParams {
                name: "b".into(),
                paused: Some(true),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(parts(&store), (2, 2), "a paused queue keeps its parts");
        let got = store.task_claim(claim(&[], &[], 10, now)).await.unwrap();
        assert!(got.is_empty(), "a paused queue gives nothing");
        store
            .queue_update(QueueUpdateParams {
                name: "b".into(),
                paused: Some(false),
                ..Default::default()
            })
            .await
            .unwrap();
        let got = store
            .task_claim(claim(&[], &["kb"], 10, now))
            .await
            .unwrap();
        assert!(got.len() == 4 && got.iter().all(|t| t.queue == "b"));
    }
}
