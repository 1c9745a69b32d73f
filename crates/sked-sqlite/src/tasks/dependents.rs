//! Tasks that wait for tasks: a new task's edges to its parents, and what a parent's end does
//! to the tasks waiting for it, in the ending's transaction (the rules:
//! `sked_store::rules::dependents`). A waiting task's parents not yet counted are a number in
//! `task_parents_left`, which each end counts down: the edges are written once, when the child is
//! made. An edge's `done` says its parent's end was counted before the parent's present life
//! (the parent had ended when the child was made, or ended and was retried by hand), so an end
//! counts only the edges without it. One writer orders every insert and ending, so an ending
//! asks once whether any task waits at all and, most often, does nothing more.

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};
use sked_core::{ParentFailure, TaskId, TaskState};
use sked_store::rules::dependents::{self, ChildChange, Start};
use sked_store::states::ACTIVE;
use sked_store::*;

use crate::codec::{db_err, id_list, state, text, ts};

/// The states of `parents`, in their order (`None`: no such task).
pub(crate) fn parent_states(
    conn: &Connection,
    parents: &[TaskId],
) -> Result<Vec<(TaskId, Option<TaskState>)>> {
    let mut found = std::collections::HashMap::with_capacity(parents.len());
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

static EDGE_INSERTS: std::sync::LazyLock<[String; 4]> = std::sync::LazyLock::new(|| {
    super::row_inserts("task_edges (child, parent, done, run_anyway)", 4)
});
static LEFT_INSERTS: std::sync::LazyLock<[String; 4]> =
    std::sync::LazyLock::new(|| super::row_inserts("task_parents_left (task, parents_left)", 2));

/// The edges of new tasks to their parents and the counts of the parents they wait for,
/// written together after the tasks' rows.
#[derive(Default)]
pub(crate) struct Links {
    /// Child, parent, whether the edge is counted already, whether the child runs anyway.
    edges: Vec<(TaskId, TaskId, bool, bool)>,
    /// Child, its parents not yet ended.
    left: Vec<(TaskId, i32)>,
}

impl Links {
    /// The edges of the new task `child` to `parents` (as [`parent_states`] read them) and what
    /// [`dependents::at_enqueue`] made of them. A child made cancelled says why at once.
    pub(crate) fn add(
        &mut self,
        conn: &Connection,
        child: TaskId,
        parents: &[(TaskId, Option<TaskState>)],
        then: ParentFailure,
        start: &Start,
        now: Timestamp,
    ) -> Result<()> {
        for (parent, s) in parents {
            let done = s.is_some_and(TaskState::is_finished);
            self.edges.push((child, *parent, done, !then.is_cancel()));
        }
        if start.parents_left > 0 {
            self.left.push((child, start.parents_left));
        }
        if let Some(error) = &start.error {
            conn.prepare_cached("UPDATE tasks SET last_error = ?2, finished_at = ?3 WHERE id = ?1")
                .map_err(db_err)?
                .execute(params![child, error, ts(now)])
                .map_err(db_err)?;
        }
        Ok(())
    }

    pub(crate) fn write(&self, conn: &Connection) -> Result<()> {
        let edges: Vec<[&dyn rusqlite::ToSql; 4]> = (self.edges.iter())
            .map(|(c, p, d, r)| [c as &dyn rusqlite::ToSql, p, d, r])
            .collect();
        super::insert_rows(conn, &EDGE_INSERTS, &edges)?;
        let left: Vec<[&dyn rusqlite::ToSql; 2]> = (self.left.iter())
            .map(|(c, n)| [c as &dyn rusqlite::ToSql, n])
            .collect();
        super::insert_rows(conn, &LEFT_INSERTS, &left)
    }
}

/// What the ends in `ended` (tasks and the state each ended in) do to the tasks waiting for
/// them, and so on down the graph: each child is counted down, released or cancelled; then
/// to their batches ([`super::batches::ended`]). Returns the earliest run time of the tasks
/// released or enqueued, if any was.
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
    // Every end, those cascaded to children included, for the batches they belong to.
    let mut all = ended.clone();
    if !any_waiting(conn)? {
        ended.clear();
    }
    let mut released: Option<Timestamp> = None;
    // One child's parents among the ends, reused from child to child.
    let mut parents: Vec<(TaskId, TaskState)> = Vec::new();
    while !ended.is_empty() {
        let edges = child_edges(conn, &ended)?;
        let states: std::collections::HashMap<TaskId, TaskState> = ended.drain(..).collect();
        // Released children by the state they take, each set with one statement.
        let mut release_to: std::collections::BTreeMap<&'static str, Vec<TaskId>> =
            Default::default();
        for group in edges.chunk_by(|a, b| a.child.id == b.child.id) {
            let c = &group[0].child;
            parents.clear();
            parents.extend(group.iter().map(|e| (e.parent, states[&e.parent])));
            match dependents::after_parents(c, &parents, now) {
                ChildChange::Leave => {}
                ChildChange::Wait { parents_left } => {
                    conn.prepare_cached(
                        "UPDATE task_parents_left SET parents_left = ?2 WHERE task = ?1",
                    )
                    .map_err(db_err)?
                    .execute(params![c.id, parents_left])
                    .map_err(db_err)?;
                }
                ChildChange::Release { state } => {
                    release_to.entry(state.as_str()).or_default().push(c.id);
                    released = Some(released.map_or(c.run_at, |r| r.min(c.run_at)));
                }
                ChildChange::Cancel { error } => {
                    conn.prepare_cached(
                        "UPDATE tasks SET state = 'cancelled', finished_at = ?2, last_error = ?3 \
                         WHERE id = ?1 AND state = 'waiting'",
                    )
                    .map_err(db_err)?
                    .execute(params![c.id, ts(now), error])
                    .map_err(db_err)?;
                    ended.push((c.id, TaskState::Cancelled));
                    all.push((c.id, TaskState::Cancelled));
                }
            }
        }
        for (state, ids) in release_to {
            conn.prepare_cached(
                "UPDATE tasks SET state = ?2 WHERE id IN rarray(?1) AND state = 'waiting'",
            )
            .map_err(db_err)?
            .execute(params![id_list(&ids), state])
            .map_err(db_err)?;
        }
    }
    super::batches::ended(conn, &all, now)?;
    if let Some(at) = released {
        super::note_released(at);
    }
    Ok(released)
}

/// What a failed parent does to a child whose edges say `run_anyway`.
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

/// An edge an end counts, with its child as the count needs it.
struct Edge {
    parent: TaskId,
    /// The child's row and its parents not yet counted before these ends; what a failed
    /// parent does to it (every edge of a child says the same: `run_anyway`).
    child: dependents::Child,
}

/// The edges the ends in `ended` count, in child order (a child's edges together), read with
/// their children in one statement.
fn child_edges(conn: &Connection, ended: &[(TaskId, TaskState)]) -> Result<Vec<Edge>> {
    let ids: Vec<TaskId> = ended.iter().map(|(id, _)| *id).collect();
    let mut stmt = conn
        .prepare_cached(crate::partial_indexes::CHILD_EDGES)
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(&ids)], |r| {
            Ok(Edge {
                parent: r.get(1)?,
                child: dependents::Child {
                    id: r.get(0)?,
                    state: state(text(r, 3)?)?,
                    parents_left: r.get(5)?,
                    on_parent_failure: parent_failure(r.get(2)?),
                    run_at: crate::codec::from_ts(r.get(4)?),
                },
            })
        })
        .map_err(db_err)?;
    let mut edges = rows
        .collect::<rusqlite::Result<Vec<Edge>>>()
        .map_err(db_err)?;
    edges.sort_by_key(|e| e.child.id);
    Ok(edges)
}

/// Marks the edges of `parent`, which has ended and is about to run again by hand, counted:
/// its children heard of its end, and its next end must not count them again.
pub(crate) fn counted(conn: &Connection, parent: TaskId) -> Result<()> {
    conn.prepare_cached("UPDATE task_edges SET done = 1 WHERE parent = ?1 AND done = 0")
        .map_err(db_err)?
        .execute([parent])
        .map_err(db_err)?;
    Ok(())
}

/// Fills in `task`'s parents (all, and those it still waits for) and children, each in id
/// order, and what a failed parent does to it.
pub(crate) fn family(conn: &Connection, task: &mut sked_core::Task) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.parent, e.done = 0 AND coalesce(p.state IN {ACTIVE}, 0), e.run_anyway \
                 FROM task_edges e LEFT JOIN tasks p ON p.id = e.parent \
                 WHERE e.child = ?1 ORDER BY e.parent"
        ))
        .map_err(db_err)?;
    let rows = stmt
        .query_map([task.id], |r| {
            Ok((
                r.get::<_, TaskId>(0)?,
                r.get::<_, bool>(1)?,
                r.get::<_, bool>(2)?,
            ))
        })
        .map_err(db_err)?;
    for row in rows {
        let (parent, uncounted, run_anyway) = row.map_err(db_err)?;
        task.on_parent_failure = parent_failure(run_anyway);
        task.depends_on.push(parent);
        if uncounted {
            task.waiting_for.push(parent);
        }
    }
    let mut stmt = conn
        .prepare_cached("SELECT child FROM task_edges WHERE parent = ?1 ORDER BY child")
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
) -> Result<std::collections::HashMap<TaskId, Vec<TaskId>>> {
    let mut out: std::collections::HashMap<TaskId, Vec<TaskId>> = Default::default();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT e.child, e.parent FROM task_edges e JOIN tasks p ON p.id = e.parent \
             WHERE e.child IN rarray(?1) AND e.done = 0 AND p.state IN {ACTIVE} \
             ORDER BY e.child, e.parent"
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

/// Removes the edges and counts of deleted tasks `ids` (an [`id_list`]'s ids).
pub(crate) const PRUNE_EDGES: [&str; 3] = [
    "DELETE FROM task_edges WHERE child IN rarray(?1)",
    "DELETE FROM task_edges WHERE parent IN rarray(?1)",
    "DELETE FROM task_parents_left WHERE task IN rarray(?1)",
];
