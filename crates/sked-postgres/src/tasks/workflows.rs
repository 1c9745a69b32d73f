//! Workflows: their tasks inserted with their edges in one transaction, and read back with
//! their counts and graph. A workflow's row holds its tasks and their names there, in id
//! order (`tasks`, `names`), and each task names its workflow (`workflow`).

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::{Object, Transaction};
use sked_core::{TaskId, TaskState, WorkflowId};
use sked_store::*;
use tokio_postgres::GenericClient;

use crate::codec::{col, db_err, state};

/// The ids of the tasks of the workflow in parameter `param` (`$3`, say), as a subquery.
pub(crate) fn tasks_of(param: &str) -> String {
    format!("(SELECT unnest(tasks) FROM sked_workflows WHERE id = {param})")
}

/// A part of a `WITH`: delete the workflows `workflows` (a subquery) of the tasks `ids` (a
/// subquery, tasks being deleted in the same statement) that are left with none. The
/// statement's snapshot still holds the tasks it deletes, so a workflow is empty when its only
/// tasks are among `ids` and it has no kept stage.
pub(crate) fn forget_sql(ids: &str, workflows: &str) -> String {
    format!(
        "emptied AS (DELETE FROM sked_workflows wf WHERE wf.id IN {workflows} \
           AND NOT EXISTS (SELECT 1 FROM sked_tasks x WHERE x.id = ANY(wf.tasks) \
             AND x.id NOT IN {ids}) \
           AND NOT EXISTS (SELECT 1 FROM sked_stages k WHERE k.workflow = wf.id))"
    )
}

/// As a statement of its own, after the tasks of the array `$1` were deleted: the workflows
/// `$2` (theirs) left with none of their tasks are deleted, and the batches'
/// (`batches::forget_sql`) part.
pub(crate) static FORGET: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH emptied AS (DELETE FROM sked_workflows wf WHERE wf.id = ANY($2::bigint[]) \
           AND NOT EXISTS (SELECT 1 FROM sked_tasks x WHERE x.id = ANY(wf.tasks)) \
           AND NOT EXISTS (SELECT 1 FROM sked_stages k WHERE k.workflow = wf.id)), {} \
         SELECT 1",
        super::batches::forget_sql("(SELECT unnest($1::bigint[]))")
    )
});

/// Inserts the workflow's row, its tasks (a run of tasks that wait for none of each other goes
/// in as one insert, [`rules::workflows::runs`]) and which task is which, in one transaction.
pub(crate) async fn create(
    c: &mut Object,
    channel: &str,
    p: &WorkflowCreateParams,
    keeping: super::kept_stages::Keeping,
) -> Result<WorkflowCreated> {
    let tx = c.transaction().await.map_err(db_err)?;
    let made = insert(&tx, channel, p, keeping).await?;
    tx.commit().await.map_err(db_err)?;
    Ok(made)
}

/// [`create`] inside the caller's transaction.
///
/// Runs of tasks that qualify are kept until released as `keeping` says
/// ([`super::kept_stages`]).
pub(crate) async fn insert(
    tx: &Transaction<'_>,
    channel: &str,
    p: &WorkflowCreateParams,
    keeping: super::kept_stages::Keeping,
) -> Result<WorkflowCreated> {
    let size = p.tasks.len() as i64;
    let row = tx
        .query_one(
            "INSERT INTO sked_workflows (name, created_at, size, schedule, nominal_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[&p.name, &p.now, &size, &p.schedule, &p.nominal_at],
        )
        .await
        .map_err(db_err)?;
    let id: WorkflowId = col(&row, 0)?;
    // The tasks that others of the workflow wait for: flagged as they go in, and, being this
    // transaction's rows, neither locked nor flagged again when their children go in.
    let mut has_children = vec![false; p.tasks.len()];
    for t in &p.tasks {
        for &a in &t.after {
            has_children[a] = true;
        }
    }
    let mut ids: Vec<TaskId> = Vec::with_capacity(p.tasks.len());
    let mut made = super::dependents::Made::default();
    for run in rules::workflows::runs(&p.tasks)? {
        let members = super::insert::Members {
            workflow: Some(id),
            has_children: &has_children[run.clone()],
            keeping,
        };
        let inserted = super::insert::insert_workflow_run(
            &**tx,
            channel,
            &p.tasks[run],
            &ids,
            &mut made,
            &members,
            p.now,
        )
        .await?;
        ids.extend(inserted.iter().map(|t| t.id));
    }
    // In id order: runs are inserted in turn, and each answers its ids ascending.
    let names: Vec<&str> = p.tasks.iter().map(|t| t.name.as_str()).collect();
    tx.execute(
        "UPDATE sked_workflows SET tasks = $2, names = $3 WHERE id = $1",
        &[&id, &ids, &names],
    )
    .await
    .map_err(db_err)?;
    Ok(WorkflowCreated { id, tasks: ids })
}

/// The columns of a workflow's row that [`info_from_row`] reads.
const COLUMNS: &str = "id, name, created_at, size, schedule, nominal_at";

fn info_from_row(r: &tokio_postgres::Row) -> Result<WorkflowInfo> {
    Ok(WorkflowInfo {
        id: col(r, 0)?,
        name: col(r, 1)?,
        created_at: col(r, 2)?,
        state: WorkflowState::Active,
        done: false,
        total: col::<i64>(r, 3)?.max(0) as u64,
        counts: BTreeMap::new(),
        finished_at: None,
        schedule: col(r, 4)?,
        nominal_at: col(r, 5)?,
    })
}

/// Counts the tasks of `workflows` by state, and when the last of each ended.
async fn count<C: GenericClient + Sync>(
    c: &C,
    workflows: Vec<WorkflowInfo>,
) -> Result<Vec<WorkflowInfo>> {
    let ids: Vec<WorkflowId> = workflows.iter().map(|w| w.id).collect();
    let rows = c
        .query(
            "SELECT id, state, sum(n)::bigint, max(finished_at) FROM ( \
               SELECT w.id, t.state, count(*) AS n, max(t.finished_at) AS finished_at \
               FROM sked_workflows w JOIN sked_tasks t ON t.id = ANY(w.tasks) \
               WHERE w.id = ANY($1) GROUP BY w.id, t.state \
               UNION ALL \
               SELECT k.workflow, CASE WHEN k.released THEN 'available' ELSE 'waiting' END, \
                 sum(k.size - k.taken), NULL \
               FROM sked_stages k WHERE k.workflow = ANY($1) GROUP BY k.workflow, 2) c \
             GROUP BY id, state",
            &[&ids],
        )
        .await
        .map_err(db_err)?;
    let mut by_id: HashMap<WorkflowId, WorkflowInfo> =
        workflows.into_iter().map(|w| (w.id, w)).collect();
    for r in &rows {
        let Some(w) = by_id.get_mut(&col::<i64>(r, 0)?) else {
            continue;
        };
        let s: TaskState = state(&col::<String>(r, 1)?)?;
        w.counts.insert(s, col::<i64>(r, 2)?.max(0) as u64);
        w.finished_at = w.finished_at.max(col(r, 3)?);
    }
    Ok(ids
        .iter()
        .filter_map(|id| by_id.remove(id))
        .map(WorkflowInfo::settle)
        .collect())
}

fn not_found(id: WorkflowId) -> StoreError {
    StoreError::NotFound {
        what: "workflow",
        id: id.to_string(),
    }
}

pub(crate) async fn get(c: &Object, id: WorkflowId) -> Result<WorkflowInfo> {
    let row = c
        .query_opt(
            &format!("SELECT {COLUMNS} FROM sked_workflows WHERE id = $1"),
            &[&id],
        )
        .await
        .map_err(db_err)?
        .ok_or_else(|| not_found(id))?;
    let mut counted = count(&***c, vec![info_from_row(&row)?]).await?;
    counted.pop().ok_or_else(|| not_found(id))
}

pub(crate) async fn list(c: &Object, p: &WorkflowListParams) -> Result<Page<WorkflowInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let rows = c
        .query(
            &format!(
                "SELECT {COLUMNS} FROM sked_workflows WHERE id < $1 ORDER BY id DESC LIMIT $2"
            ),
            &[&p.before_id.unwrap_or(i64::MAX), &(i64::from(limit) + 1)],
        )
        .await
        .map_err(db_err)?;
    let more = rows.len() > limit as usize;
    let items = (rows.iter().take(limit as usize))
        .map(info_from_row)
        .collect::<Result<_>>()?;
    Ok(Page {
        items: count(&***c, items).await?,
        more,
    })
}

pub(crate) async fn tasks(c: &Object, p: &WorkflowTasksParams) -> Result<Page<WorkflowNode>> {
    let exists = c
        .query_opt("SELECT 1 FROM sked_workflows WHERE id = $1", &[&p.id])
        .await
        .map_err(db_err)?;
    if exists.is_none() {
        return Err(not_found(p.id));
    }
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let rows = c
        .query(
            "SELECT m.task, m.name, t.kind, t.state \
             FROM sked_workflows w, unnest(w.tasks, w.names) AS m(task, name) \
             JOIN sked_tasks t ON t.id = m.task WHERE w.id = $1 AND m.task > $2 \
             ORDER BY m.task LIMIT $3",
            &[&p.id, &p.after_id.unwrap_or(0), &(i64::from(limit) + 1)],
        )
        .await
        .map_err(db_err)?;
    let more = rows.len() > limit as usize;
    let mut nodes = (rows.iter().take(limit as usize))
        .map(|r| {
            Ok(WorkflowNode {
                id: col(r, 0)?,
                name: col(r, 1)?,
                kind: col(r, 2)?,
                state: state(&col::<String>(r, 3)?)?,
                after: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Each node's parents of the workflow, by their names there: those it waits for one by
    // one, and the tasks of the waits it waits for whole.
    let ids: Vec<TaskId> = nodes.iter().map(|n| n.id).collect();
    let rows = c
        .query(
            "WITH m AS (SELECT m.task, m.name FROM sked_workflows w, \
                 unnest(w.tasks, w.names) AS m(task, name) WHERE w.id = $2) \
             SELECT t.id, m.task, m.name FROM sked_tasks t \
               JOIN sked_wait_parents p ON p.wait = t.wait \
               JOIN m ON m.task = p.parent WHERE t.id = ANY($1) \
             UNION ALL \
             SELECT t.id, m.task, m.name FROM sked_tasks t \
               JOIN sked_wait_stages s ON s.wait = t.wait JOIN sked_waits w ON w.id = s.stage \
               CROSS JOIN LATERAL unnest(w.tasks) AS st(task) \
               JOIN m ON m.task = st.task WHERE t.id = ANY($1) \
             ORDER BY 1, 2",
            &[&ids, &p.id],
        )
        .await
        .map_err(db_err)?;
    let mut after: HashMap<TaskId, Vec<String>> = HashMap::new();
    for r in &rows {
        after.entry(col(r, 0)?).or_default().push(col(r, 2)?);
    }
    for n in &mut nodes {
        n.after = after.remove(&n.id).unwrap_or_default();
    }
    Ok(Page { items: nodes, more })
}

/// The workflow `task` belongs to, if any, and its name there.
pub(crate) async fn of_task<C: GenericClient + Sync>(
    c: &C,
    task: TaskId,
) -> Result<Option<sked_core::TaskWorkflow>> {
    let row = c
        .query_opt(
            "SELECT w.id, w.names[array_position(w.tasks, t.id)] FROM sked_tasks t \
             JOIN sked_workflows w ON w.id = t.workflow WHERE t.id = $1",
            &[&task],
        )
        .await
        .map_err(db_err)?;
    row.map(|r| {
        Ok(sked_core::TaskWorkflow {
            id: col(&r, 0)?,
            name: col(&r, 1)?,
        })
    })
    .transpose()
}
