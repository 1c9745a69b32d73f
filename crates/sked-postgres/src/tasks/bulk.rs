//! Bulk operations: retry, cancel or delete every task a filter matches, one bounded batch per call,
//! each batch one transaction of a few set-wise statements.

use deadpool_postgres::{Object, Transaction};
use sked_core::{Task, TaskId, TaskState};
use sked_store::states::{FINISHED, NOT_STARTED};
use sked_store::*;

use super::Param;
use super::claim::positions::Key;
use super::endings::AttemptRows;
use crate::codec::{TASK_COLUMNS, col, db_err, state, tasks_from_rows};

/// The filter's conditions on tasks `t`, their parameters pushed after those in `params`
/// (numbered on from them).
fn conditions<'a>(
    f: &'a BulkFilter,
    states: &'a Vec<String>,
    params: &mut Vec<Param<'a>>,
) -> String {
    let next = |params: &mut Vec<Param<'a>>, p: Param<'a>| {
        params.push(p);
        params.len()
    };
    let mut sql = format!("t.state = ANY(${}::text[])", next(params, states));
    if let Some(q) = &f.queue {
        sql.push_str(&format!(" AND t.queue = ${}::text", next(params, q)));
    }
    if let Some(k) = &f.kind {
        sql.push_str(&format!(" AND t.kind = ${}::text", next(params, k)));
    }
    if let Some(k) = &f.key {
        sql.push_str(&format!(
            " AND t.concurrency_key = ${}::text",
            next(params, k)
        ));
    }
    if let Some(k) = &f.unique_key {
        sql.push_str(&format!(" AND t.unique_key = ${}::text", next(params, k)));
    }
    if let Some(w) = &f.workflow {
        sql.push_str(&format!(
            " AND t.id IN {}",
            super::workflows::tasks_of(&format!("${}::bigint", next(params, w)))
        ));
    }
    if let Some(b) = &f.before {
        sql.push_str(&format!(
            " AND t.created_at < ${}::timestamptz",
            next(params, b)
        ));
    }
    if let Some(s) = &f.since {
        sql.push_str(&format!(
            " AND t.created_at >= ${}::timestamptz",
            next(params, s)
        ));
    }
    sql
}

fn state_names(f: &BulkFilter) -> Vec<String> {
    f.states.iter().map(|s| s.as_str().to_string()).collect()
}

pub(crate) async fn count(c: &mut Object, f: &BulkFilter) -> Result<u64> {
    let states = state_names(f);
    let mut params: Vec<Param<'_>> = Vec::new();
    let cond = conditions(f, &states, &mut params);
    let row = c
        .query_one(
            &format!("SELECT count(*) FROM sked_tasks t WHERE {cond}"),
            &params,
        )
        .await
        .map_err(db_err)?;
    Ok(col::<i64>(&row, 0)?.max(0) as u64)
}

/// One batch; also the priority and run time of each task it made claimable or waiting,
/// retried or released (for [`crate::PgStore`]'s claim positions).
pub(crate) async fn batch(
    c: &mut Object,
    channel: &str,
    p: &TaskBulkParams,
) -> Result<(BulkBatch, super::dependents::Released)> {
    let tx = c.transaction().await.map_err(db_err)?;
    let states = state_names(&p.filter);
    let after = p.after.unwrap_or(0);
    let limit = i64::from(p.limit);
    let mut params: Vec<Param<'_>> = vec![&after, &limit];
    let cond = conditions(&p.filter, &states, &mut params);
    let rows = tx
        .query(
            &format!(
                "SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE {cond} AND t.id > $1 \
                 ORDER BY t.id LIMIT $2 FOR UPDATE SKIP LOCKED"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    let tasks: Vec<Task> = tasks_from_rows(&rows)?;
    let ids: Vec<i64> = tasks.iter().map(|t| t.id).collect();
    let mut claimable = Vec::new();
    match p.action {
        BulkAction::Retry => {
            // Each row is about to describe a new attempt: keep the ones that ended them.
            let mut attempts = AttemptRows::default();
            for t in &tasks {
                if let Some(last) = rules::current_attempt(t) {
                    let at = last.finished_at.unwrap_or(p.now);
                    attempts.push(t, &last.outcome, last.error.as_deref(), at);
                }
            }
            attempts.insert(&tx).await?;
            tx.execute(
                &format!(
                    "UPDATE sked_tasks t SET state = 'available', run_at = $2, finished_at = NULL, \
                       cancel_requested = false, lease_expires_at = NULL, expires_at = NULL, \
                       max_attempts = greatest(t.max_attempts, t.attempt + 1) \
                     WHERE t.id = ANY($1) AND {}",
                    super::by_key(&format!("t.state IN {FINISHED}"))
                ),
                &[&ids, &p.now],
            )
            .await
            .map_err(db_err)?;
            super::batches::reopened(&tx, &ids).await?;
            claimable = tasks.iter().map(|t| (t.priority, p.now, false)).collect();
            let first = tasks
                .iter()
                .map(|t| Key::before(t.priority, p.now))
                .min_by_key(|k| k.order());
            if first.is_some() {
                super::announce_tasks(&*tx, channel, first, None).await?;
            }
        }
        BulkAction::Cancel => {
            tx.execute(
                &format!(
                    "UPDATE sked_tasks t SET state = 'cancelled', finished_at = $2 \
                     WHERE t.id = ANY($1) AND {}",
                    super::by_key(&format!("t.state IN {NOT_STARTED}"))
                ),
                &[&ids, &p.now],
            )
            .await
            .map_err(db_err)?;
            let cancelled = (tasks.iter())
                .filter(|t| !t.state.is_finished() && t.state != sked_core::TaskState::Running)
                .map(|t| (t.id, sked_core::TaskState::Cancelled));
            claimable = super::dependents::release(&tx, channel, cancelled, p.now).await?;
            tx.execute(
                &format!(
                    "UPDATE sked_tasks t SET cancel_requested = true WHERE t.id = ANY($1) AND {}",
                    super::by_key("t.state = 'running'")
                ),
                &[&ids],
            )
            .await
            .map_err(db_err)?;
            let scheduled = tasks
                .iter()
                .any(|t| t.schedule.is_some() && t.state != TaskState::Running);
            if scheduled {
                super::announce_schedules(&*tx, channel).await?;
            }
        }
        // The rows are locked and finished (the filter's states are).
        BulkAction::Delete => delete(&tx, &ids).await?,
    }
    tx.commit().await.map_err(db_err)?;
    let batch = BulkBatch {
        changed: ids.len() as u64,
        next_after: ids
            .last()
            .copied()
            .filter(|_| ids.len() == p.limit as usize),
    };
    Ok((batch, claimable))
}

/// Deletes the tasks `ids`, locked by the caller and finished, with their attempts, edges,
/// progress and memberships, as retention removes them.
pub(crate) async fn delete(tx: &Transaction<'_>, ids: &[TaskId]) -> Result<()> {
    let rows = tx
        .query(
            &format!(
                "DELETE FROM sked_tasks t WHERE t.id = ANY($1) AND t.state IN {FINISHED} \
                 RETURNING t.wait, t.workflow"
            ),
            &[&ids],
        )
        .await
        .map_err(db_err)?;
    let waits: Vec<Option<i64>> = rows.iter().map(|r| col(r, 0)).collect::<Result<_>>()?;
    let workflows: Vec<Option<i64>> = rows.iter().map(|r| col(r, 1)).collect::<Result<_>>()?;
    tx.execute(super::dependents::FORGET.as_str(), &[&ids, &waits])
        .await
        .map_err(db_err)?;
    for sql in [
        "DELETE FROM sked_task_attempts WHERE task_id = ANY($1)",
        "DELETE FROM sked_task_progress WHERE task_id = ANY($1)",
    ] {
        tx.execute(sql, &[&ids]).await.map_err(db_err)?;
    }
    tx.execute(super::workflows::FORGET.as_str(), &[&ids, &workflows])
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Deletes task `id` if it has ended ([`rules::check_delete`]), its row locked first.
pub(crate) async fn delete_one(c: &mut Object, id: TaskId) -> Result<()> {
    let tx = c.transaction().await.map_err(db_err)?;
    let row = tx
        .query_opt(
            "SELECT state FROM sked_tasks WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(db_err)?
        .ok_or_else(|| StoreError::task_not_found(id))?;
    rules::check_delete(id, state(&col::<String>(&row, 0)?)?)?;
    delete(&tx, &[id]).await?;
    tx.commit().await.map_err(db_err)
}
