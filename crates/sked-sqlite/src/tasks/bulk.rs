//! Bulk operations: retry, cancel or delete every task a filter matches, one bounded batch
//! per call.

use rusqlite::{Connection, Transaction, params_from_iter, types::Value};
use sked_core::TaskId;
use sked_store::*;

use crate::codec::{db_err, ts};

/// The filter's conditions, and their values numbered from `?1`.
fn conditions(f: &BulkFilter) -> (String, Vec<Value>) {
    let mut values: Vec<Value> = f
        .states
        .iter()
        .map(|s| Value::Text(s.as_str().into()))
        .collect();
    let marks: Vec<String> = (1..=values.len()).map(|i| format!("?{i}")).collect();
    let mut sql = format!("state IN ({})", marks.join(", "));
    for (column, value) in [
        ("queue", &f.queue),
        ("kind", &f.kind),
        ("concurrency_key", &f.key),
        ("unique_key", &f.unique_key),
    ] {
        if let Some(v) = value {
            values.push(Value::Text(v.clone()));
            sql.push_str(&format!(" AND {column} = ?{}", values.len()));
        }
    }
    if let Some(w) = f.workflow {
        values.push(Value::Integer(w));
        sql.push_str(&format!(
            " AND id IN {}",
            super::workflows::tasks_of(&format!("?{}", values.len()))
        ));
    }
    for (cond, t) in [("created_at <", f.before), ("created_at >=", f.since)] {
        if let Some(t) = t {
            values.push(Value::Integer(ts(t)));
            sql.push_str(&format!(" AND {cond} ?{}", values.len()));
        }
    }
    (sql, values)
}

pub(crate) fn count(conn: &Connection, f: &BulkFilter) -> Result<u64> {
    let (cond, values) = conditions(f);
    conn.prepare_cached(&format!("SELECT count(*) FROM tasks WHERE {cond}"))
        .map_err(db_err)?
        .query_row(params_from_iter(values), |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
        .map_err(db_err)
}

pub(crate) fn batch(tx: &Transaction<'_>, p: &TaskBulkParams) -> Result<BulkBatch> {
    let (cond, mut values) = conditions(&p.filter);
    values.push(Value::Integer(p.after.unwrap_or(0)));
    let after = values.len();
    values.push(Value::Integer(i64::from(p.limit)));
    let ids: Vec<TaskId> = {
        let mut stmt = tx
            .prepare_cached(&format!(
                "SELECT id FROM tasks WHERE {cond} AND id > ?{after} ORDER BY id LIMIT ?{}",
                after + 1
            ))
            .map_err(db_err)?;
        let rows = stmt
            .query_map(params_from_iter(values), |r| r.get(0))
            .map_err(db_err)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db_err)?
    };
    match p.action {
        // A statement a table for the whole batch, as retention deletes.
        BulkAction::Delete => super::delete(tx, &ids)?,
        BulkAction::Retry => {
            for &id in &ids {
                super::retry(tx, &TaskRetryParams { id, now: p.now })?;
            }
        }
        BulkAction::Cancel => {
            let mut cancelled = Vec::with_capacity(ids.len());
            for &id in &ids {
                let task = super::cancel_only(tx, id, p.now)?;
                cancelled.push((task.id, task.state));
            }
            // Together, after the batch: a task of the batch is cancelled by it, not by its
            // parent's end.
            super::dependents::release(tx, cancelled, p.now)?;
        }
    }
    Ok(BulkBatch {
        changed: ids.len() as u64,
        next_after: ids
            .last()
            .copied()
            .filter(|_| ids.len() == p.limit as usize),
    })
}
