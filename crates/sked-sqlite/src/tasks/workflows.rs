//! Workflows: their tasks inserted with their edges in one write, and read back with their
//! counts and graph.

use std::collections::{BTreeMap, HashMap};

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_core::{TaskId, WorkflowId};
use sked_store::*;

use crate::codec::{db_err, from_ts, id_list, opt_ts, state, text, ts};

/// The ids of the tasks of the workflow in parameter `param` (`?3`, say), as a subquery that
/// names the parameter once.
pub(crate) fn tasks_of(param: &str) -> String {
    format!(
        "(SELECT t.id FROM workflows w JOIN tasks t ON t.id BETWEEN w.first_task AND w.last_task \
          WHERE w.id = {param})"
    )
}

/// Inserts the workflow's tasks (a run of tasks that wait for none of each other goes in as
/// one insert, [`rules::workflows::runs`]), then its row, which holds its tasks as the range
/// of their ids and their names in id order; a large stage that qualifies is kept as
/// `keeping` says until it is released ([`super::kept_stages`]). Takes the tasks: a workflow's
/// inserts are moved into the store's, not copied.
pub(crate) fn create(
    tx: &Transaction<'_>,
    p: WorkflowCreateParams,
    keeping: sked_store::kept::Keeping,
) -> Result<WorkflowCreated> {
    let runs = rules::workflows::runs(&p.tasks)?;
    let mut ids: Vec<TaskId> = Vec::with_capacity(p.tasks.len());
    let mut names: Vec<String> = Vec::with_capacity(p.tasks.len());
    // The workflow's tasks so far: its later tasks' parents, not read again, and their waits.
    let mut made = super::dependents::Made::default();
    made.keeping = keeping;
    let mut given = p.tasks.into_iter();
    for run in runs {
        let mut tasks = Vec::with_capacity(run.len());
        for t in given.by_ref().take(run.len()) {
            tasks.push(rules::workflows::with_parents(t.insert, &t.after, &ids));
            names.push(t.name);
        }
        let params = TaskInsertParams { tasks, now: p.now };
        for t in super::insert_many_after(tx, &params, &mut made)? {
            ids.push(t.id);
        }
    }
    // One write makes them, and ids are never reused: they follow one another, and every
    // task in their range is one of them.
    let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
        return Err(StoreError::Invalid(
            "a workflow needs at least one task".into(),
        ));
    };
    if last - first + 1 != ids.len() as i64 {
        return Err(StoreError::Backend(format!(
            "a workflow's {} tasks took ids {first} to {last}",
            ids.len()
        )));
    }
    let names = serde_json::to_string(&names).map_err(|e| StoreError::Backend(e.to_string()))?;
    tx.prepare_cached(
        "INSERT INTO workflows (name, created_at, size, schedule, nominal_at, first_task, \
           last_task, names) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .map_err(db_err)?
    .execute(params![
        p.name,
        ts(p.now),
        ids.len() as i64,
        p.schedule,
        p.nominal_at.map(ts),
        first,
        last,
        names
    ])
    .map_err(db_err)?;
    let id = tx.last_insert_rowid();
    Ok(WorkflowCreated { id, tasks: ids })
}

/// The columns of a workflow's row that [`info_from_row`] reads.
const COLUMNS: &str = "id, name, created_at, size, schedule, nominal_at";

fn info_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<WorkflowInfo> {
    Ok(WorkflowInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        created_at: from_ts(r.get(2)?),
        state: WorkflowState::Active,
        done: false,
        total: r.get::<_, i64>(3)?.max(0) as u64,
        counts: BTreeMap::new(),
        finished_at: None,
        schedule: r.get(4)?,
        nominal_at: opt_ts(r.get(5)?),
    })
}

/// Counts `w`'s tasks by state, and when the last one ended: its rows, and the tasks of its
/// kept parts ([`super::kept_stages`]) as waiting or, released, available.
fn count(conn: &Connection, w: WorkflowInfo) -> Result<WorkflowInfo> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT t.state, count(*), max(t.finished_at) FROM workflows w \
             JOIN tasks t ON t.id BETWEEN w.first_task AND w.last_task WHERE w.id = ?1 \
             GROUP BY t.state \
             UNION ALL \
             SELECT CASE WHEN s.released THEN 'available' ELSE 'waiting' END, \
               sum(s.size - s.taken), NULL FROM workflows w \
             JOIN stages s ON s.id BETWEEN w.first_task AND w.last_task WHERE w.id = ?1 \
             GROUP BY 1",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([w.id], |r| {
            Ok((
                state(text(r, 0)?)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<i64>>(2)?,
            ))
        })
        .map_err(db_err)?;
    let mut w = w;
    for row in rows {
        let (s, n, finished) = row.map_err(db_err)?;
        *w.counts.entry(s).or_default() += n.max(0) as u64;
        w.finished_at = w.finished_at.max(opt_ts(finished));
    }
    Ok(w.settle())
}

pub(crate) fn get(conn: &Connection, id: WorkflowId) -> Result<WorkflowInfo> {
    let row = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM workflows WHERE id = ?1"))
        .map_err(db_err)?
        .query_row([id], info_from_row)
        .optional()
        .map_err(db_err)?;
    let Some(w) = row else {
        return Err(not_found(id));
    };
    count(conn, w)
}

fn not_found(id: WorkflowId) -> StoreError {
    StoreError::NotFound {
        what: "workflow",
        id: id.to_string(),
    }
}

pub(crate) fn list(conn: &Connection, p: &WorkflowListParams) -> Result<Page<WorkflowInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let rows: Vec<WorkflowInfo> = {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM workflows WHERE id < ?1 ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(db_err)?;
        stmt.query_map(
            params![p.before_id.unwrap_or(i64::MAX), i64::from(limit) + 1],
            info_from_row,
        )
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?
    };
    let more = rows.len() > limit as usize;
    let items = (rows.into_iter().take(limit as usize))
        .map(|w| count(conn, w))
        .collect::<Result<_>>()?;
    Ok(Page { items, more })
}

pub(crate) fn tasks(conn: &Connection, p: &WorkflowTasksParams) -> Result<Page<WorkflowNode>> {
    let range = conn
        .prepare_cached("SELECT first_task, last_task, names FROM workflows WHERE id = ?1")
        .map_err(db_err)?
        .query_row([p.id], |r| {
            Ok((
                r.get::<_, Option<i64>>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()
        .map_err(db_err)?;
    let Some((first, last, names)) = range else {
        return Err(not_found(p.id));
    };
    let (first, last) = (first.unwrap_or(0), last.unwrap_or(-1));
    let names: Vec<Option<String>> =
        serde_json::from_str(&names).map_err(|e| StoreError::Backend(e.to_string()))?;
    // The name of task `id` of the range.
    let name = |id: TaskId| -> String {
        usize::try_from(id - first)
            .ok()
            .and_then(|k| names.get(k).cloned().flatten())
            .unwrap_or_default()
    };
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let mut nodes: Vec<WorkflowNode> = {
        let mut stmt = conn
            .prepare_cached(
                "SELECT id, kind, state FROM tasks WHERE id BETWEEN ?1 AND ?2 AND id > ?3 \
                 ORDER BY id LIMIT ?4",
            )
            .map_err(db_err)?;
        stmt.query_map(
            params![first, last, p.after_id.unwrap_or(0), i64::from(limit) + 1],
            |r| {
                let id: TaskId = r.get(0)?;
                Ok(WorkflowNode {
                    id,
                    name: name(id),
                    kind: r.get(1)?,
                    state: state(text(r, 2)?)?,
                    after: Vec::new(),
                })
            },
        )
        .map_err(db_err)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db_err)?
    };
    let more = nodes.len() > limit as usize;
    nodes.truncate(limit as usize);
    let ids: Vec<TaskId> = nodes.iter().map(|n| n.id).collect();
    let mut after: HashMap<TaskId, Vec<String>> = HashMap::new();
    // The parents of the workflow's own that are still there, each child's in id order.
    let mut stmt = conn
        .prepare_cached(
            "SELECT t.id, q.id FROM tasks t JOIN wait_parents p ON p.wait = t.wait \
               JOIN tasks q ON q.id = p.parent \
             WHERE t.id IN rarray(?1) AND q.id BETWEEN ?2 AND ?3 \
             UNION ALL \
             SELECT t.id, q.id FROM tasks t JOIN wait_stages s ON s.wait = t.wait \
               JOIN tasks q ON q.wait = s.stage \
             WHERE t.id IN rarray(?1) AND q.id BETWEEN ?2 AND ?3 \
             ORDER BY 1, 2",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![id_list(&ids), first, last], |r| {
            Ok((r.get::<_, TaskId>(0)?, r.get::<_, TaskId>(1)?))
        })
        .map_err(db_err)?;
    for row in rows {
        let (child, parent) = row.map_err(db_err)?;
        after.entry(child).or_default().push(name(parent));
    }
    for n in &mut nodes {
        n.after = after.remove(&n.id).unwrap_or_default();
    }
    Ok(Page { items: nodes, more })
}

/// The workflow whose range holds `?1` (a task's id), if any: the one that starts last at or
/// before it.
const WORKFLOW_OF: &str = "SELECT id FROM workflows WHERE first_task <= ?1 \
    ORDER BY first_task DESC LIMIT 1";

/// The workflow `task` belongs to, if any, and its name there.
pub(crate) fn of_task(conn: &Connection, task: TaskId) -> Result<Option<sked_core::TaskWorkflow>> {
    conn.prepare_cached(&format!(
        "SELECT w.id, json_extract(w.names, '$[' || (?1 - w.first_task) || ']') \
         FROM workflows w WHERE w.id = ({WORKFLOW_OF}) AND ?1 <= w.last_task"
    ))
    .map_err(db_err)?
    .query_row([task], |r| {
        Ok(sked_core::TaskWorkflow {
            id: r.get(0)?,
            name: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
        })
    })
    .optional()
    .map_err(db_err)
}

/// Forgets the workflows left with no task once the tasks of `?1` (an [`id_list`]) are
/// deleted.
pub(crate) fn forget(tx: &Transaction<'_>, list: &rusqlite::vtab::array::Array) -> Result<()> {
    let workflows: Vec<i64> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT DISTINCT w.id FROM rarray(?1) x \
                 JOIN workflows w ON w.id = ({}) AND x.value <= w.last_task",
                WORKFLOW_OF.replace("?1", "x.value")
            ))
            .map_err(db_err)?;
        stmt.query_map([list], |r| r.get(0))
            .map_err(db_err)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db_err)?
    };
    if workflows.is_empty() {
        return Ok(());
    }
    tx.prepare_cached(
        "DELETE FROM workflows WHERE id IN rarray(?1) \
         AND NOT EXISTS (SELECT 1 FROM tasks t \
                         WHERE t.id BETWEEN workflows.first_task AND workflows.last_task) \
         AND NOT EXISTS (SELECT 1 FROM stages s \
                         WHERE s.id BETWEEN workflows.first_task AND workflows.last_task)",
    )
    .map_err(db_err)?
    .execute([id_list(&workflows)])
    .map_err(db_err)?;
    Ok(())
}
