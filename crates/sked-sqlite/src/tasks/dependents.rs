//! Tasks that wait for tasks: a new task's edges to its parents, and what a parent's end does
//! to the tasks waiting for it, in the ending's transaction (the rules:
//! `sked_store::rules::dependents`). One writer orders every insert and ending, so an ending
//! asks once whether any edge is open at all and, most often, does nothing more.

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};
use sked_core::{ParentFailure, TaskId, TaskState};
use sked_store::rules::dependents::{self, ChildChange, Start};
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

/// Writes the edges of the new task `child` to `parents` (as [`parent_states`] read them) and
/// what [`dependents::at_enqueue`] made of them.
pub(crate) fn link(
    conn: &Connection,
    child: TaskId,
    parents: &[(TaskId, Option<TaskState>)],
    then: ParentFailure,
    start: &Start,
    now: Timestamp,
) -> Result<()> {
    let mut edge = conn
        .prepare_cached(
            "INSERT OR FAIL INTO task_edges (child, parent, done, run_anyway) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db_err)?;
    for (parent, s) in parents {
        let done = s.is_some_and(TaskState::is_finished);
        edge.execute(params![child, parent, done, !then.is_cancel()])
            .map_err(db_err)?;
    }
    if let Some(error) = &start.error {
        conn.prepare_cached("UPDATE tasks SET last_error = ?2, finished_at = ?3 WHERE id = ?1")
            .map_err(db_err)?
            .execute(params![child, error, ts(now)])
            .map_err(db_err)?;
    }
    Ok(())
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
    if !any_open(conn)? {
        ended.clear();
    }
    let mut released: Option<Timestamp> = None;
    while !ended.is_empty() {
        let ends = close_edges(conn, &ended)?;
        ended.clear();
        let children = read_children(conn, &ends)?;
        // Released children by the state they take, each set with one statement.
        let mut release_to: std::collections::BTreeMap<&'static str, Vec<TaskId>> =
            Default::default();
        for (child, parents) in &ends {
            let Some(c) = children.get(child) else {
                continue;
            };
            match dependents::after_parents(c, parents, now) {
                ChildChange::Leave => {}
                // Its edges say what it still waits for.
                ChildChange::Wait { .. } => {}
                ChildChange::Release { state } => {
                    release_to.entry(state.as_str()).or_default().push(*child);
                    released = Some(released.map_or(c.run_at, |r| r.min(c.run_at)));
                }
                ChildChange::Cancel { error } => {
                    conn.prepare_cached(
                        "UPDATE tasks SET state = 'cancelled', finished_at = ?2, last_error = ?3 \
                         WHERE id = ?1 AND state = 'waiting'",
                    )
                    .map_err(db_err)?
                    .execute(params![child, ts(now), error])
                    .map_err(db_err)?;
                    ended.push((*child, TaskState::Cancelled));
                    all.push((*child, TaskState::Cancelled));
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

/// Whether any edge waits for its parent's end.
fn any_open(conn: &Connection) -> Result<bool> {
    conn.prepare_cached(crate::partial_indexes::ANY_OPEN_EDGE)
        .map_err(db_err)?
        .query_row([], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
        .map_err(db_err)
}

/// Marks the open edges of `ended`'s parents done; the children they reach, in id order, each
/// with the ends of its parents among them.
#[allow(clippy::type_complexity)]
fn close_edges(
    conn: &Connection,
    ended: &[(TaskId, TaskState)],
) -> Result<Vec<(TaskId, Vec<(TaskId, TaskState)>)>> {
    let states: std::collections::HashMap<TaskId, TaskState> = ended.iter().copied().collect();
    let ids: Vec<TaskId> = ended.iter().map(|(id, _)| *id).collect();
    let mut stmt = conn
        .prepare_cached(crate::partial_indexes::CLOSE_EDGES)
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(&ids)], |r| {
            Ok((r.get::<_, TaskId>(0)?, r.get::<_, TaskId>(1)?))
        })
        .map_err(db_err)?;
    let mut by_child: std::collections::BTreeMap<TaskId, Vec<(TaskId, TaskState)>> =
        Default::default();
    for row in rows {
        let (child, parent) = row.map_err(db_err)?;
        by_child
            .entry(child)
            .or_default()
            .push((parent, states[&parent]));
    }
    Ok(by_child.into_iter().collect())
}

/// The children `ends` reaches, as the release needs them: state and run time from their
/// rows, and from their edges whether a parent is left besides those of `ends` being counted
/// now (as `parents_left`, the ones counted now added: only whether it reaches 0 decides) and
/// what a failed parent does to them (every edge of a child says the same). One statement for
/// them all, each probe an index lookup however many parents a child has.
fn read_children(
    conn: &Connection,
    ends: &[(TaskId, Vec<(TaskId, TaskState)>)],
) -> Result<std::collections::HashMap<TaskId, dependents::Child>> {
    let counted: std::collections::HashMap<TaskId, usize> =
        ends.iter().map(|(c, ps)| (*c, ps.len())).collect();
    let ids: Vec<TaskId> = ends.iter().map(|(c, _)| *c).collect();
    let mut stmt = conn
        .prepare_cached(crate::partial_indexes::READ_CHILDREN)
        .map_err(db_err)?;
    let rows = stmt
        .query_map([id_list(&ids)], |r| {
            let id: TaskId = r.get(0)?;
            let left = i32::from(r.get::<_, bool>(3)?);
            Ok(dependents::Child {
                id,
                state: state(text(r, 1)?)?,
                parents_left: left + counted.get(&id).copied().unwrap_or(0) as i32,
                on_parent_failure: parent_failure(r.get::<_, Option<bool>>(4)?.unwrap_or(false)),
                run_at: crate::codec::from_ts(r.get(2)?),
            })
        })
        .map_err(db_err)?;
    let mut out = std::collections::HashMap::with_capacity(ids.len());
    for row in rows {
        let child = row.map_err(db_err)?;
        out.insert(child.id, child);
    }
    Ok(out)
}

/// Fills in `task`'s parents (all, and those it still waits for) and children, each in id
/// order, and what a failed parent does to it.
pub(crate) fn family(conn: &Connection, task: &mut sked_core::Task) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT parent, done, run_anyway FROM task_edges WHERE child = ?1 ORDER BY parent",
        )
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
        let (parent, done, run_anyway) = row.map_err(db_err)?;
        task.on_parent_failure = parent_failure(run_anyway);
        task.depends_on.push(parent);
        if !done {
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
        .prepare_cached(
            "SELECT child, parent FROM task_edges WHERE child IN rarray(?1) AND done = 0 \
             ORDER BY child, parent",
        )
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

/// Removes the edges of pruned tasks `ids` (an [`id_list`]'s ids).
pub(crate) const PRUNE_EDGES: [&str; 2] = [
    "DELETE FROM task_edges WHERE child IN rarray(?1)",
    "DELETE FROM task_edges WHERE parent IN rarray(?1)",
];
