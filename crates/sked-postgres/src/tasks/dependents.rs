//! Tasks that wait for tasks: a new task's edges to its parents, and what a parent's end does
//! to the tasks waiting for it, in the ending's transaction (the rules:
//! `sked_store::rules::dependents`).
//!
//! The insert of a child sets `has_children` on its parents, so it takes their row locks (in
//! id order) and reads their states under them: an ending that races it either committed
//! first (the insert sees the end) or waits for the insert's commit (and then sees the flag,
//! and the edges with its next statement). A release locks the children in id order before it
//! counts them down, so two last parents ending at once cannot both miss that they were last.
//!
//! An end reads its edges and counts the children down (`parents_left`); it does not write
//! the edges. An edge's `done` says its parent's end was counted before the parent's present
//! life (the parent had ended when the child was made, or ended and was retried by hand), so
//! an end counts only the edges without it.

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::Transaction;
use jiff::Timestamp;
use sked_core::{ParentFailure, Task, TaskId, TaskState};
use sked_store::rules::dependents::{self, ChildChange, ParentStates, Start};
use sked_store::states::ACTIVE;
use sked_store::*;
use tokio_postgres::GenericClient;

use crate::codec::{col, db_err, state};

/// Sets `has_children` on `parents`, under their row locks taken in id order, and returns
/// their states in the order given (`None`: no such task).
pub(crate) async fn lock_parents<C: GenericClient + Sync>(
    c: &C,
    parents: &[TaskId],
) -> Result<Vec<(TaskId, Option<TaskState>)>> {
    let rows = c
        .query(
            "UPDATE sked_tasks t SET has_children = true FROM ( \
               SELECT id FROM sked_tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE) l \
             WHERE t.id = l.id RETURNING t.id, t.state",
            &[&parents],
        )
        .await
        .map_err(db_err)?;
    let mut found = HashMap::with_capacity(rows.len());
    for r in &rows {
        found.insert(col::<TaskId>(r, 0)?, state(&col::<String>(r, 1)?)?);
    }
    Ok(parents
        .iter()
        .map(|p| (*p, found.get(p).copied()))
        .collect())
}

/// Writes the edges of the new tasks `children` to their parents (as [`lock_parents`] read
/// them), one statement however many.
pub(crate) async fn write_edges<C: GenericClient + Sync>(
    c: &C,
    children: &[TaskId],
    links: &[(ParentStates, ParentFailure, Start)],
) -> Result<()> {
    let (mut child, mut parent, mut done) = (Vec::new(), Vec::new(), Vec::new());
    for (&id, (parents, ..)) in children.iter().zip(links) {
        for (p, s) in parents {
            child.push(id);
            parent.push(*p);
            done.push(s.is_some_and(TaskState::is_finished));
        }
    }
    c.execute(
        "INSERT INTO sked_task_edges (child, parent, done) \
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bool[])",
        &[&child, &parent, &done],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// [`write_edges`] for a task inserted on its own (with a unique key), and what
/// [`dependents::at_enqueue`] made of its parents written to its row.
pub(crate) async fn link<C: GenericClient + Sync>(
    c: &C,
    child: TaskId,
    link: (ParentStates, ParentFailure, Start),
    now: Timestamp,
) -> Result<()> {
    let (parents, then, start) = link;
    let finished = start.state.is_finished().then_some(now);
    let on_failure = (!then.is_cancel()).then_some(then.as_str());
    c.execute(
        "UPDATE sked_tasks SET state = $2, parents_left = $3, on_parent_failure = $4, \
           last_error = $5, finished_at = $6 WHERE id = $1",
        &[
            &child,
            &start.state.as_str(),
            &start.parents_left,
            &on_failure,
            &start.error,
            &finished,
        ],
    )
    .await
    .map_err(db_err)?;
    write_edges(c, &[child], &[(parents, then, start)]).await
}

/// What the ends in `ended` (tasks and the state each ended in; others are skipped) do to the
/// tasks waiting for them, and so on down the graph. Released tasks are announced on `channel`.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    channel: &str,
    ended: impl IntoIterator<Item = (TaskId, TaskState)>,
    now: Timestamp,
) -> Result<()> {
    let mut ended: Vec<(TaskId, TaskState)> =
        ended.into_iter().filter(|(_, s)| s.is_finished()).collect();
    // Every end, those cascaded to children included, for the batches they belong to.
    let mut all = ended.clone();
    let mut released: Option<Timestamp> = None;
    let mut due = false;
    while !ended.is_empty() {
        let states: HashMap<TaskId, TaskState> = ended.iter().copied().collect();
        let ids: Vec<TaskId> = ended.iter().map(|(id, _)| *id).collect();
        ended.clear();
        let edges = tx
            .query(
                "SELECT child, parent FROM sked_task_edges WHERE parent = ANY($1) AND NOT done",
                &[&ids],
            )
            .await
            .map_err(db_err)?;
        let mut by_child: BTreeMap<TaskId, Vec<(TaskId, TaskState)>> = BTreeMap::new();
        for r in &edges {
            let parent: TaskId = col(r, 1)?;
            by_child
                .entry(col(r, 0)?)
                .or_default()
                .push((parent, states[&parent]));
        }
        if by_child.is_empty() {
            break;
        }
        let children: Vec<TaskId> = by_child.keys().copied().collect();
        let rows = tx
            .query(
                "SELECT id, state, parents_left, on_parent_failure, run_at FROM sked_tasks \
                 WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&children],
            )
            .await
            .map_err(db_err)?;
        let mut change = Changes::default();
        for r in &rows {
            let then: Option<String> = col(r, 3)?;
            let child = dependents::Child {
                id: col(r, 0)?,
                state: state(&col::<String>(r, 1)?)?,
                parents_left: col(r, 2)?,
                on_parent_failure: match then.as_deref() {
                    Some("run") => ParentFailure::Run,
                    _ => ParentFailure::Cancel,
                },
                run_at: col(r, 4)?,
            };
            let (state, left, error) =
                match dependents::after_parents(&child, &by_child[&child.id], now) {
                    ChildChange::Leave => continue,
                    ChildChange::Wait { parents_left } => (TaskState::Waiting, parents_left, None),
                    ChildChange::Release { state } => {
                        released = Some(released.map_or(child.run_at, |r| r.min(child.run_at)));
                        due |= state == TaskState::Available;
                        (state, 0, None)
                    }
                    ChildChange::Cancel { error } => {
                        ended.push((child.id, TaskState::Cancelled));
                        all.push((child.id, TaskState::Cancelled));
                        (TaskState::Cancelled, child.parents_left, Some(error))
                    }
                };
            change.id.push(child.id);
            change.state.push(state.as_str().to_string());
            change.left.push(left);
            change.finished_at.push(state.is_finished().then_some(now));
            change.error.push(error);
        }
        if !change.id.is_empty() {
            tx.execute(
                "UPDATE sked_tasks t SET state = u.state, parents_left = u.left_, \
                   finished_at = coalesce(u.finished_at, t.finished_at), \
                   last_error = coalesce(u.error, t.last_error) \
                 FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::text[]) \
                   AS u(id, state, left_, finished_at, error) \
                 WHERE t.id = u.id AND t.state = 'waiting'",
                &[
                    &change.id,
                    &change.state,
                    &change.left,
                    &change.finished_at,
                    &change.error,
                ],
            )
            .await
            .map_err(db_err)?;
        }
    }
    if let Some(run_at) = released {
        // Where in claim order they are is not worked out: claims look from the front.
        let waiting = (!due || run_at > now).then_some(run_at);
        tx.execute(
            &format!(
                "SELECT {}",
                crate::listen::notify_tasks_sql(
                    "NULL::timestamptz",
                    "NULL::int",
                    "$2::timestamptz"
                )
            ),
            &[&channel, &waiting],
        )
        .await
        .map_err(db_err)?;
    }
    super::batches::ended(&**tx, channel, &all, now).await
}

/// Marks the edges of `parent`, which has ended and is about to run again by hand, counted:
/// its children heard of its end, and its next end must not count them again.
pub(crate) async fn counted<C: GenericClient + Sync>(c: &C, parent: TaskId) -> Result<()> {
    c.execute(
        "UPDATE sked_task_edges SET done = true WHERE parent = $1 AND NOT done",
        &[&parent],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// The changes to waiting children, as parallel arrays.
#[derive(Default)]
struct Changes {
    id: Vec<TaskId>,
    state: Vec<String>,
    left: Vec<i32>,
    finished_at: Vec<Option<Timestamp>>,
    error: Vec<Option<String>>,
}

/// Fills in `task`'s parents (all, and those it still waits for) and children, each in id
/// order, and what a failed parent does to it.
pub(crate) async fn family<C: GenericClient + Sync>(c: &C, task: &mut Task) -> Result<()> {
    let rows = c
        .query(
            &format!("SELECT (SELECT on_parent_failure FROM sked_tasks WHERE id = $1), NULL::bigint, NULL::bool \
             UNION ALL (SELECT NULL, e.parent, NOT e.done AND coalesce(p.state IN {ACTIVE}, false) \
               FROM sked_task_edges e LEFT JOIN sked_tasks p ON p.id = e.parent \
               WHERE e.child = $1 ORDER BY e.parent) \
             UNION ALL (SELECT 'child', child, NULL FROM sked_task_edges WHERE parent = $1 ORDER BY child)"),
            &[&task.id],
        )
        .await
        .map_err(db_err)?;
    for (i, r) in rows.iter().enumerate() {
        let tag: Option<String> = col(r, 0)?;
        if i == 0 {
            if tag.as_deref() == Some("run") {
                task.on_parent_failure = ParentFailure::Run;
            }
            continue;
        }
        let id: TaskId = col(r, 1)?;
        match tag.as_deref() {
            Some("child") => task.dependents.push(id),
            _ => {
                task.depends_on.push(id);
                if col::<bool>(r, 2)? {
                    task.waiting_for.push(id);
                }
            }
        }
    }
    // In id order whatever order the union's parts come back in.
    for ids in [
        &mut task.depends_on,
        &mut task.waiting_for,
        &mut task.dependents,
    ] {
        ids.sort_unstable();
    }
    Ok(())
}

/// Fills in what each waiting task among `tasks` still waits for.
pub(crate) async fn fill_waiting_for<C: GenericClient + Sync>(
    c: &C,
    tasks: &mut [Task],
) -> Result<()> {
    let waiting: Vec<TaskId> = (tasks.iter())
        .filter(|t| t.state == TaskState::Waiting)
        .map(|t| t.id)
        .collect();
    if waiting.is_empty() {
        return Ok(());
    }
    let rows = c
        .query(
            &format!(
                "SELECT e.child, e.parent FROM sked_task_edges e JOIN sked_tasks p ON p.id = e.parent \
                 WHERE e.child = ANY($1) AND NOT e.done AND p.state IN {ACTIVE} \
                 ORDER BY e.child, e.parent"
            ),
            &[&waiting],
        )
        .await
        .map_err(db_err)?;
    let mut by_child: HashMap<TaskId, Vec<TaskId>> = HashMap::new();
    for r in &rows {
        by_child.entry(col(r, 0)?).or_default().push(col(r, 1)?);
    }
    for t in tasks {
        if let Some(parents) = by_child.remove(&t.id) {
            t.waiting_for = parents;
        }
    }
    Ok(())
}
