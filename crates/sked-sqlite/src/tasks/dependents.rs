//! Tasks that wait for tasks, in waits: the tasks made with the same parents share one count
//! of parents not yet counted and one failure rule (docs/decisions/0022-tasks-with-the-same-parents-wait-together.md).
//! A wait waits for tasks one by one (`wait_parents`) or for every task of another wait
//! (`wait_stages`: the fan-in after a stage); its edges are written once, when it is made, and
//! an end counts each wait it reaches down, releases or cancels its waiting tasks with one
//! statement, in the ending's transaction (the rules: `sked_store::rules::dependents`). An
//! edge's `done`, or a (task, wait) pair in `wait_counted` for a task of a stage, says the
//! parent's end was counted before its present life (it had ended when the wait was made, or
//! ended and was retried by hand), so an end counts each wait once. One writer orders every
//! insert and ending, so an ending asks once whether any task waits at all and, most often,
//! does nothing more.

use std::collections::HashMap;

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};
use sked_core::{ParentFailure, TaskId, TaskState};
use sked_store::rules::dependents::{self, Start, WaitChange};
use sked_store::states::ACTIVE;
use sked_store::*;

use crate::codec::{db_err, id_list, state, text, ts};

/// The states of `parents`, in their order (`None`: no such task).
pub(crate) fn parent_states(
    conn: &Connection,
    parents: &[TaskId],
) -> Result<Vec<(TaskId, Option<TaskState>)>> {
    let mut found = HashMap::with_capacity(parents.len());
    let mut stmt = conn
        .prepare_cached("SELECT id, state FROM tasks WHERE id IN rarray(?1)")
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(parents)], |r| Ok((r.get(0)?, state(text(r, 1)?)?)))
        .map_err(db_err)?;
    for row in rows {
        let (id, s): (TaskId, TaskState) = row.map_err(db_err)?;
        found.insert(id, s);
    }
    Ok(parents
        .iter()
        .map(|p| (*p, found.get(p).copied()))
        .collect())
}

/// A wait: tasks that share one count of parents and one failure rule.
pub(crate) type WaitId = i64;

/// What a transaction has made so far: the states of its tasks (later tasks' parents, not read
/// again), and its waits, for tasks made with the same parents to share one and for a task that
/// waits for a whole wait's tasks to wait for that wait.
#[derive(Default)]
pub(crate) struct Made {
    states: HashMap<TaskId, TaskState>,
    /// The wait of each task made with one.
    waits: HashMap<TaskId, WaitId>,
    /// How many tasks each wait was made with; `None` once one of them started ended (its end
    /// was counted as it was made, and a wait that waits for the whole stage could not tell).
    sizes: HashMap<WaitId, Option<usize>>,
    /// The wait of the tasks of the present insert made with these parents and whether they
    /// run anyway. Only tasks of one insert share: a later task may wait for the whole of a
    /// wait made before, which must not grow after.
    shared: HashMap<(Vec<TaskId>, bool), WaitId>,
    /// The waits whose tasks start cancelled, and why: written to the tasks once they exist.
    cancelled: Vec<(WaitId, String)>,
    /// Edges of new waits not written yet: parent, wait, whether counted already; and stage,
    /// wait.
    parent_edges: Vec<(TaskId, WaitId, bool)>,
    stage_edges: Vec<(WaitId, WaitId)>,
    /// How the stages this transaction makes are kept until released.
    pub(crate) keeping: sked_store::kept::Keeping,
}

static PARENT_INSERTS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| super::row_inserts("wait_parents (parent, wait, done)", 3));
static STAGE_INSERTS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| super::row_inserts("wait_stages (stage, wait)", 2));

impl Made {
    /// The state `id` was made in, if this transaction made it.
    pub(crate) fn state(&self, id: TaskId) -> Option<TaskState> {
        self.states.get(&id).copied()
    }

    /// Whether this transaction made `id`.
    pub(crate) fn contains(&self, id: TaskId) -> bool {
        self.states.contains_key(&id)
    }

    /// Starts an insert: its tasks share waits among themselves, not with those before.
    pub(crate) fn next_insert(&mut self) {
        self.shared.clear();
    }

    /// Notes a task made in `state` with `wait`.
    pub(crate) fn add(&mut self, id: TaskId, state: TaskState, wait: Option<WaitId>) {
        self.states.insert(id, state);
        if let Some(w) = wait {
            self.waits.insert(id, w);
            let size = self.sizes.entry(w).or_insert(Some(0));
            *size = size.filter(|_| !state.is_finished()).map(|n| n + 1);
        }
    }

    /// The wait of a new task with parents `depends_on` (their states in `parents`, as
    /// [`parent_states`] reads them) that starts as `start` says: the one of the tasks this
    /// transaction made with the same parents and rule, or a new one (its edges are written by
    /// [`Made::write`]). Among the
    /// parents, all the tasks of a wait this transaction made (two or more, none ended) are one
    /// edge to that wait.
    pub(crate) fn wait_for(
        &mut self,
        conn: &Connection,
        depends_on: &[TaskId],
        parents: &[(TaskId, Option<TaskState>)],
        then: ParentFailure,
        start: &Start,
    ) -> Result<WaitId> {
        let key = (depends_on.to_vec(), !then.is_cancel());
        if let Some(w) = self.shared.get(&key) {
            return Ok(*w);
        }
        conn.prepare_cached("INSERT INTO waits (parents_left, run_anyway) VALUES (?1, ?2)")
            .map_err(db_err)?
            .execute(params![start.parents_left, !then.is_cancel()])
            .map_err(db_err)?;
        let wait = conn.last_insert_rowid();
        let stages = self.stages_among(depends_on);
        for (parent, s) in parents {
            if !self.waits.get(parent).is_some_and(|w| stages.contains(w)) {
                let done = s.is_some_and(TaskState::is_finished);
                self.parent_edges.push((*parent, wait, done));
            }
        }
        self.stage_edges
            .extend(stages.into_iter().map(|stage| (stage, wait)));
        if let Some(error) = &start.error {
            self.cancelled.push((wait, error.clone()));
        }
        self.shared.insert(key, wait);
        Ok(wait)
    }

    /// The waits this transaction made all of whose tasks are among `parents`: two or more,
    /// none ended as it was made.
    fn stages_among(&self, parents: &[TaskId]) -> Vec<WaitId> {
        let mut found: HashMap<WaitId, usize> = HashMap::new();
        for p in parents {
            if let Some(w) = self.waits.get(p) {
                *found.entry(*w).or_default() += 1;
            }
        }
        let mut stages: Vec<WaitId> = (found.into_iter())
            .filter(|(w, n)| *n >= 2 && self.sizes.get(w) == Some(&Some(*n)))
            .map(|(w, _)| w)
            .collect();
        stages.sort_unstable();
        stages
    }

    /// Writes the edges of the waits made since the last call, in multi-row statements, and
    /// says why the tasks made cancelled so far were: a parent failed before they were made.
    pub(crate) fn write(&mut self, conn: &Connection, now: Timestamp) -> Result<()> {
        let parents: Vec<[&dyn rusqlite::ToSql; 3]> = (self.parent_edges.iter())
            .map(|(p, w, d)| [p as &dyn rusqlite::ToSql, w, d])
            .collect();
        super::insert_rows(conn, &PARENT_INSERTS, &parents)?;
        let stages: Vec<[&dyn rusqlite::ToSql; 2]> = (self.stage_edges.iter())
            .map(|(s, w)| [s as &dyn rusqlite::ToSql, w])
            .collect();
        super::insert_rows(conn, &STAGE_INSERTS, &stages)?;
        self.parent_edges.clear();
        self.stage_edges.clear();
        for (wait, error) in &self.cancelled {
            conn.prepare_cached(
                "UPDATE tasks SET last_error = ?2, finished_at = ?3 \
                 WHERE wait = ?1 AND state = 'cancelled' AND finished_at IS NULL",
            )
            .map_err(db_err)?
            .execute(params![wait, error, ts(now)])
            .map_err(db_err)?;
        }
        Ok(())
    }
}

/// What the ends in `ended` (tasks and the state each ended in) do to the tasks waiting for
/// them, and so on down the graph: each wait they reach is counted down, released or
/// cancelled; then to their batches ([`super::batches::ended`]). Returns the earliest run time
/// of the tasks released, if any was.
pub(crate) fn release(
    conn: &Connection,
    ended: impl IntoIterator<Item = (TaskId, TaskState)>,
    now: Timestamp,
) -> Result<Option<Timestamp>> {
    let mut ended: Vec<(TaskId, TaskState)> =
        ended.into_iter().filter(|(_, s)| s.is_finished()).collect();
    if ended.is_empty() {
        return Ok(None);
    }
    // Every end, those cascaded to waiting tasks included, for the batches they belong to.
    let mut all = ended.clone();
    if !any_waiting(conn)? {
        ended.clear();
    }
    let mut released: Option<Timestamp> = None;
    // One wait's parents among the ends, reused from wait to wait.
    let mut parents: Vec<(TaskId, TaskState)> = Vec::new();
    while !ended.is_empty() {
        let reached = waits_reached(conn, &ended)?;
        let states: HashMap<TaskId, TaskState> = ended.drain(..).collect();
        for group in reached.chunk_by(|a, b| a.wait == b.wait) {
            let w = &group[0];
            parents.clear();
            parents.extend(group.iter().map(|e| (e.parent, states[&e.parent])));
            match dependents::count(w.parents_left, parent_failure(w.run_anyway), &parents) {
                WaitChange::Wait { parents_left } => {
                    conn.prepare_cached("UPDATE waits SET parents_left = ?2 WHERE id = ?1")
                        .map_err(db_err)?
                        .execute(params![w.wait, parents_left])
                        .map_err(db_err)?;
                }
                WaitChange::Release => {
                    conn.prepare_cached("UPDATE waits SET parents_left = 0 WHERE id = ?1")
                        .map_err(db_err)?
                        .execute([w.wait])
                        .map_err(db_err)?;
                    let kept = super::kept_stages::release(conn, w.wait, now)?;
                    let first: Option<i64> = conn
                        .prepare_cached(FIRST_RELEASED)
                        .map_err(db_err)?
                        .query_row([w.wait], |r| r.get(0))
                        .map_err(db_err)?;
                    let first = match (first, kept) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    conn.prepare_cached(RELEASE)
                        .map_err(db_err)?
                        .execute(params![w.wait, ts(now)])
                        .map_err(db_err)?;
                    if let Some(run_at) = first.map(crate::codec::from_ts) {
                        released = Some(released.map_or(run_at, |r| r.min(run_at)));
                    }
                }
                WaitChange::Cancel { error } => {
                    super::kept_stages::make(conn, &super::kept_stages::Kept::Wait(w.wait))?;
                    let mut stmt = conn
                        .prepare_cached(
                            "UPDATE tasks SET state = 'cancelled', finished_at = ?2, \
                             last_error = ?3 WHERE wait = ?1 AND state = 'waiting' RETURNING id",
                        )
                        .map_err(db_err)?;
                    let rows = stmt
                        .query_map(params![w.wait, ts(now), error], |r| r.get::<_, TaskId>(0))
                        .map_err(db_err)?;
                    for id in rows {
                        let id = id.map_err(db_err)?;
                        ended.push((id, TaskState::Cancelled));
                        all.push((id, TaskState::Cancelled));
                    }
                }
            }
        }
    }
    super::batches::ended(conn, &all, now)?;
    if let Some(at) = released {
        super::note_released(at);
    }
    Ok(released)
}

/// The earliest run time of the waiting tasks of wait `?1`, read before [`RELEASE`] releases
/// them: with a `RETURNING` of every run time, a workflow's release of 10,000 tasks took
/// 21–22 ms, and 17–18 ms this way (six runs each), since SQLite keeps the rows an update
/// returns until it has ended.
const FIRST_RELEASED: &str = "SELECT min(run_at) FROM tasks WHERE wait = ?1 AND state = 'waiting'";

/// Releases the waiting tasks of wait `?1` at `?2` (now), each as
/// [`sked_store::rules::state_for_run_at`] says for its run time.
const RELEASE: &str = "UPDATE tasks \
    SET state = CASE WHEN run_at <= ?2 THEN 'available' ELSE 'scheduled' END \
    WHERE wait = ?1 AND state = 'waiting'";

/// What a failed parent does to the tasks of a wait that says `run_anyway`.
fn parent_failure(run_anyway: bool) -> ParentFailure {
    match run_anyway {
        true => ParentFailure::Run,
        false => ParentFailure::Cancel,
    }
}

/// Whether any task waits for its parents.
fn any_waiting(conn: &Connection) -> Result<bool> {
    conn.prepare_cached(crate::partial_indexes::ANY_WAITING)
        .map_err(db_err)?
        .query_row([], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(db_err)
}

/// A wait an end counts, with the wait as the count needs it.
struct Reached {
    wait: WaitId,
    parent: TaskId,
    /// The wait's parents not yet counted before these ends.
    parents_left: i32,
    run_anyway: bool,
}

/// The waits the ends in `ended` count, in wait order (a wait's ends together), read with
/// their counts in one statement: those that wait for an ended task, and those that wait for
/// the whole of an ended task's wait.
fn waits_reached(conn: &Connection, ended: &[(TaskId, TaskState)]) -> Result<Vec<Reached>> {
    let ids: Vec<TaskId> = ended.iter().map(|(id, _)| *id).collect();
    let mut stmt = conn
        .prepare_cached(crate::partial_indexes::WAITS_REACHED)
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(&ids)], |r| {
            Ok(Reached {
                wait: r.get(0)?,
                parent: r.get(1)?,
                parents_left: r.get(2)?,
                run_anyway: r.get(3)?,
            })
        })
        .map_err(db_err)?;
    let mut reached = rows
        .collect::<rusqlite::Result<Vec<Reached>>>()
        .map_err(db_err)?;
    reached.sort_by_key(|e| e.wait);
    Ok(reached)
}

/// Marks the ends of `parent`, which has ended and is about to run again by hand, counted: the
/// waits that waited for it heard of its end, and its next end must not count them again.
pub(crate) fn counted(conn: &Connection, parent: TaskId) -> Result<()> {
    conn.prepare_cached("UPDATE wait_parents SET done = 1 WHERE parent = ?1 AND done = 0")
        .map_err(db_err)?
        .execute([parent])
        .map_err(db_err)?;
    conn.prepare_cached(
        "INSERT OR IGNORE INTO wait_counted (task, wait) \
         SELECT t.id, s.wait FROM tasks t JOIN wait_stages s ON s.stage = t.wait WHERE t.id = ?1",
    )
    .map_err(db_err)?
    .execute([parent])
    .map_err(db_err)?;
    Ok(())
}

/// The parents of the tasks of wait `?1`, each with whether the wait still waits for it (not
/// counted, not ended): those it waits for one by one and the tasks of the waits it waits
/// for whole.
static PARENTS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT p.parent, p.done = 0 AND coalesce(t.state IN {ACTIVE}, 0) \
    FROM wait_parents p LEFT JOIN tasks t ON t.id = p.parent WHERE p.wait = ?1 \
    UNION ALL \
    SELECT t.id, t.state IN {ACTIVE} AND NOT EXISTS \
      (SELECT 1 FROM wait_counted c WHERE c.task = t.id AND c.wait = s.wait) \
    FROM wait_stages s JOIN tasks t ON t.wait = s.stage WHERE s.wait = ?1 \
    ORDER BY 1"
    )
});

/// Fills in `task`'s parents (all, and those it still waits for) and children, each in id
/// order, and what a failed parent does to it.
pub(crate) fn family(conn: &Connection, task: &mut sked_core::Task) -> Result<()> {
    let wait: Option<(WaitId, bool)> = conn
        .prepare_cached(
            "SELECT w.id, w.run_anyway FROM tasks t JOIN waits w ON w.id = t.wait WHERE t.id = ?1",
        )
        .map_err(db_err)?
        .query_row([task.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .map_err(db_err)?;
    if let Some((wait, run_anyway)) = wait {
        task.on_parent_failure = parent_failure(run_anyway);
        let mut stmt = conn.prepare_cached(&PARENTS).map_err(db_err)?;
        let rows = stmt
            .query_map([wait], |r| {
                Ok((r.get::<_, TaskId>(0)?, r.get::<_, bool>(1)?))
            })
            .map_err(db_err)?;
        for row in rows {
            let (parent, uncounted) = row.map_err(db_err)?;
            task.depends_on.push(parent);
            if uncounted {
                task.waiting_for.push(parent);
            }
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT c.id FROM wait_parents p JOIN tasks c ON c.wait = p.wait WHERE p.parent = ?1 \
             UNION \
             SELECT c.id FROM tasks t JOIN wait_stages s ON s.stage = t.wait \
               JOIN tasks c ON c.wait = s.wait WHERE t.id = ?1 \
             ORDER BY 1",
        )
        .map_err(db_err)?;
    let rows = stmt.query_map([task.id], |r| r.get(0)).map_err(db_err)?;
    for row in rows {
        task.dependents.push(row.map_err(db_err)?);
    }
    Ok(())
}

/// The parents not yet counted of the waiting tasks among `ids`.
pub(crate) fn waiting_for(
    conn: &Connection,
    ids: &[TaskId],
) -> Result<HashMap<TaskId, Vec<TaskId>>> {
    let mut out: HashMap<TaskId, Vec<TaskId>> = Default::default();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT t.id, p.parent FROM tasks t JOIN wait_parents p ON p.wait = t.wait \
               JOIN tasks q ON q.id = p.parent \
             WHERE t.id IN rarray(?1) AND p.done = 0 AND q.state IN {ACTIVE} \
             UNION ALL \
             SELECT t.id, q.id FROM tasks t JOIN wait_stages s ON s.wait = t.wait \
               JOIN tasks q ON q.wait = s.stage \
             WHERE t.id IN rarray(?1) AND q.state IN {ACTIVE} AND NOT EXISTS \
               (SELECT 1 FROM wait_counted c WHERE c.task = q.id AND c.wait = s.wait) \
             ORDER BY 1, 2"
        ))
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(ids)], |r| {
            Ok((r.get::<_, TaskId>(0)?, r.get::<_, TaskId>(1)?))
        })
        .map_err(db_err)?;
    for row in rows {
        let (child, parent) = row.map_err(db_err)?;
        out.entry(child).or_default().push(parent);
    }
    Ok(out)
}

/// Removes what deleted tasks `list` (an [`id_list`]'s ids, read before their rows go) leave
/// of the graph: their ends counted, the edges from them, and each wait left with no task.
pub(crate) fn prune(
    conn: &Connection,
    list: &rusqlite::vtab::array::Array,
    waits: &[WaitId],
) -> Result<()> {
    for sql in [
        "DELETE FROM wait_parents WHERE parent IN rarray(?1)",
        "DELETE FROM wait_counted WHERE task IN rarray(?1)",
    ] {
        conn.prepare_cached(sql)
            .map_err(db_err)?
            .execute([list])
            .map_err(db_err)?;
    }
    if waits.is_empty() {
        return Ok(());
    }
    let gone: Vec<WaitId> = {
        let mut stmt = conn
            .prepare_cached(
                "DELETE FROM waits WHERE id IN rarray(?1) \
                 AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.wait = waits.id) RETURNING id",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([id_list(waits)], |r| r.get(0))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    if gone.is_empty() {
        return Ok(());
    }
    let gone = id_list(&gone);
    for sql in [
        "DELETE FROM wait_parents WHERE wait IN rarray(?1)",
        "DELETE FROM wait_stages WHERE wait IN rarray(?1)",
        "DELETE FROM wait_stages WHERE stage IN rarray(?1)",
        "DELETE FROM wait_counted WHERE wait IN rarray(?1)",
    ] {
        conn.prepare_cached(sql)
            .map_err(db_err)?
            .execute([&gone])
            .map_err(db_err)?;
    }
    Ok(())
}

/// The waits of the tasks `list` (an [`id_list`]'s ids), before the tasks are deleted.
pub(crate) fn waits_of(
    conn: &Connection,
    list: &rusqlite::vtab::array::Array,
) -> Result<Vec<WaitId>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT DISTINCT wait FROM tasks WHERE id IN rarray(?1) AND wait IS NOT NULL",
        )
        .map_err(db_err)?;
    let rows = stmt.query_map([list], |r| r.get(0)).map_err(db_err)?;
    rows.collect::<rusqlite::Result<_>>().map_err(db_err)
}
