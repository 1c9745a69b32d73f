//! Claiming tasks: due waiting tasks are staged, then the first available tasks in claim order
//! (priority, then run time, then id) across the asked queues are leased to a worker.

use std::cmp::Reverse;
use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use rusqlite::{Transaction, params, params_from_iter, types::Value};
use sked_core::{Task, TaskId, TaskState};
use sked_store::*;

use super::get_row;
use crate::codec::{db_err, ts};
use crate::indexed;

/// Moves due scheduled/retrying tasks to available.
fn stage(tx: &Transaction<'_>, now: Timestamp) -> Result<usize> {
    tx.prepare_cached(&indexed::STAGE)
        .map_err(db_err)?
        .execute([ts(now)])
        .map_err(db_err)
}

pub(crate) fn claim(tx: &Transaction<'_>, p: &TaskClaimParams) -> Result<Vec<Task>> {
    stage(tx, p.now)?;
    if p.max == 0 {
        return Ok(Vec::new());
    }
    // Queue settings: paused queues are left out, limited ones get what their limit leaves.
    let mut excluded: Vec<String> = Vec::new();
    let mut quota: HashMap<String, i64> = HashMap::new();
    {
        let mut stmt = tx
            .prepare_cached(
                "SELECT q.name, q.paused, q.concurrency_limit, \
                 (SELECT count(*) FROM tasks t WHERE t.state = 'running' AND t.queue = q.name) \
                 FROM queues q WHERE q.paused = 1 OR q.concurrency_limit IS NOT NULL",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, bool>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .map_err(db_err)?;
        for row in rows {
            let (name, paused, limit, running) = row.map_err(db_err)?;
            match (paused, limit) {
                (true, _) => excluded.push(name),
                (false, Some(limit)) if running >= limit => excluded.push(name),
                (false, Some(limit)) => {
                    quota.insert(name, limit - running);
                }
                (false, None) => {}
            }
        }
    }
    let keys = if p.queues.is_empty() {
        keys_of_all(tx, p, &excluded, &mut quota)?
    } else {
        keys_of_named(tx, p, &excluded, &quota)?
    };
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let mut update = tx.prepare_cached(LEASE).map_err(db_err)?;
    keys.into_iter()
        .map(|id| {
            lease(
                tx,
                &mut update,
                id,
                &p.worker,
                p.now,
                (expires, p.timeout_grace),
            )
        })
        .collect()
}

/// Leases an available task (`?1`) to a worker (`?4`) from `?2` until `?3`.
pub(crate) const LEASE: &str = "UPDATE tasks SET state = 'running', attempt = attempt + 1, \
    started_at = ?2, lease_expires_at = ?3, worker = ?4, cancel_requested = 0 \
    WHERE id = ?1 AND state = 'available'";

/// Leases the available task `id` to `worker` from `now` until `wanted` (or sooner, by its
/// timeout and `grace`: [`rules::lease_end`]) with `update` ([`LEASE`], prepared once for a
/// whole claim); the task after.
///
/// One short statement per task: with no `IN` list of three or more constants in any partial
/// index's predicate (migration 5), a prepared one-row update costs little more than the row
/// and index writes themselves. The row is read whole before its update, and the claim's
/// change is applied to it here rather than read back.
pub(crate) fn lease(
    tx: &Transaction<'_>,
    update: &mut rusqlite::Statement<'_>,
    id: TaskId,
    worker: &str,
    now: Timestamp,
    (wanted, grace): (Timestamp, SignedDuration),
) -> Result<Task> {
    let mut task = get_row(tx, id)?;
    let expires = rules::lease_end(now, task.timeout, grace, wanted);
    let n = update
        .execute(params![id, ts(now), ts(expires), worker])
        .map_err(db_err)?;
    if n != 1 {
        // The task was read in this transaction, which holds the write lock.
        return Err(StoreError::Backend(format!(
            "task {id} was not available to claim"
        )));
    }
    task.state = TaskState::Running;
    task.attempt += 1;
    task.started_at = Some(now);
    task.lease_expires_at = Some(expires);
    task.worker = Some(worker.to_string());
    task.cancel_requested = false;
    Ok(task)
}

/// Whether claims take tasks of `queue` as they come: it is neither paused nor limited.
pub(crate) fn queue_is_open(tx: &Transaction<'_>, queue: &str) -> Result<bool> {
    tx.prepare_cached(
        "SELECT NOT EXISTS (SELECT 1 FROM queues WHERE name = ?1 \
           AND (paused = 1 OR concurrency_limit IS NOT NULL))",
    )
    .map_err(db_err)?
    .query_row([queue], |r| r.get(0))
    .map_err(db_err)
}

/// Conditions added to a claim's statement, with their values, parameters numbered from
/// `first` on.
struct Conditions {
    sql: String,
    values: Vec<Value>,
    first: usize,
}

impl Conditions {
    fn new(first: usize) -> Conditions {
        Conditions {
            sql: String::new(),
            values: Vec::new(),
            first,
        }
    }

    fn next(&self) -> usize {
        self.first + self.values.len()
    }

    /// ` AND {test} (?a, ?b, …)` (`test` as `kind IN`), unless `items` is empty.
    fn list(mut self, test: &str, items: &[String]) -> Conditions {
        if !items.is_empty() {
            self.sql.push_str(&format!(" AND {test} ("));
            for (i, item) in items.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                self.sql.push_str(&format!("{sep}?{}", self.next()));
                self.values.push(Value::Text(item.clone()));
            }
            self.sql.push(')');
        }
        self
    }

    /// The claim's filters on kinds and priority.
    fn claim_filters(self, p: &TaskClaimParams) -> Conditions {
        let mut c = self.list("kind IN", &p.kinds);
        if let Some(min) = p.min_priority {
            c.sql.push_str(&format!(" AND priority >= ?{}", c.next()));
            c.values.push(Value::Integer(i64::from(min)));
        }
        c
    }
}

/// A claim over every queue: the first available tasks of all queues but the `excluded` ones,
/// walking one index in claim order; a limited queue's tasks beyond its `quota` are skipped.
fn keys_of_all(
    tx: &Transaction<'_>,
    p: &TaskClaimParams,
    excluded: &[String],
    quota: &mut HashMap<String, i64>,
) -> Result<Vec<TaskId>> {
    let c = Conditions::new(2)
        .list("queue NOT IN", excluded)
        .claim_filters(p);
    let values = std::iter::once(Value::Integer(i64::from(p.max))).chain(c.values);
    let mut stmt = tx
        .prepare_cached(&indexed::claim_keys_all(&c.sql))
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params_from_iter(values), |r| {
            Ok((r.get::<_, TaskId>(2)?, r.get::<_, String>(3)?))
        })
        .map_err(db_err)?;
    let mut keys = Vec::new();
    for row in rows {
        let (id, queue) = row.map_err(db_err)?;
        if let Some(left) = quota.get_mut(&queue) {
            if *left <= 0 {
                continue;
            }
            *left -= 1;
        }
        keys.push(id);
    }
    Ok(keys)
}

/// A claim over named queues: each queue's first tasks in claim order (at most what its quota
/// leaves), from the per-queue index alone, merged; the first `max` of them.
fn keys_of_named(
    tx: &Transaction<'_>,
    p: &TaskClaimParams,
    excluded: &[String],
    quota: &HashMap<String, i64>,
) -> Result<Vec<TaskId>> {
    let mut queues = p.queues.clone();
    queues.sort_unstable();
    queues.dedup();
    let c = Conditions::new(3).claim_filters(p);
    let mut stmt = tx
        .prepare_cached(&indexed::claim_keys(&c.sql))
        .map_err(db_err)?;
    let mut keys: Vec<(Reverse<i64>, i64, TaskId)> = Vec::new();
    for queue in queues.iter().filter(|q| !excluded.contains(q)) {
        let max = i64::from(p.max);
        let limit = quota.get(queue).map_or(max, |&left| left.min(max));
        let args = [Value::Text(queue.clone()), Value::Integer(limit)]
            .into_iter()
            .chain(c.values.iter().cloned());
        let rows = stmt
            .query_map(params_from_iter(args), |r| {
                Ok((Reverse(r.get(0)?), r.get(1)?, r.get(2)?))
            })
            .map_err(db_err)?;
        for row in rows {
            keys.push(row.map_err(db_err)?);
        }
    }
    if queues.len() > 1 {
        keys.sort_unstable();
    }
    keys.truncate(p.max as usize);
    Ok(keys.into_iter().map(|(_, _, id)| id).collect())
}
