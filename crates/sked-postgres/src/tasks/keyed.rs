//! Claiming from a queue with a per-key limit, under its queue row's lock (see
//! [`super::limited`]): within each priority, keys take turns from after the key the last claim
//! served, and no key runs more than the limit at once.

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use jiff::Timestamp;
use sked_core::TaskId;
use sked_store::keyed::{KEYS_PER_CLAIM, KeyHeads, in_turn, round_robin};
use sked_store::*;

use super::Param;
use super::cursor::Key;
use crate::codec::{col, db_err};

/// How many of a priority's first tasks a claim looks through for tasks without a key.
const UNKEYED_LOOK: i64 = 1_000;

/// The claim's filters (kinds, lowest priority) as SQL with parameters from `$first`, pushed
/// onto `params`.
fn filters<'a>(p: &'a TaskClaimParams, first: usize, params: &mut Vec<Param<'a>>) -> String {
    let mut sql = String::new();
    if !p.kinds.is_empty() {
        sql.push_str(&format!(" AND kind = ANY(${})", first + params.len()));
        params.push(&p.kinds);
    }
    if let Some(min) = &p.min_priority {
        sql.push_str(&format!(" AND priority >= ${}", first + params.len()));
        params.push(min);
    }
    sql
}

/// The first tasks (at most `take`) a claim takes from `queue`, whose keys may each run
/// `per_key` at once: the highest priority first, keys in turn within it. Moves the queue's
/// turn (`cursor`, the last key served) on. The queue's row is locked by the caller.
pub(super) async fn candidates(
    tx: &Transaction<'_>,
    queue: &str,
    per_key: u32,
    cursor: &Option<String>,
    take: i64,
    p: &TaskClaimParams,
) -> Result<Vec<Key>> {
    let mut running: HashMap<String, i64> = HashMap::new();
    for row in tx
        .query(
            "SELECT concurrency_key, count(*) FROM sked_tasks WHERE state = 'running' \
             AND queue = $1 AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
            &[&queue],
        )
        .await
        .map_err(db_err)?
    {
        running.insert(col(&row, 0)?, col(&row, 1)?);
    }
    let mut turn = cursor.clone();
    let mut out: Vec<Key> = Vec::new();
    let mut below = i32::MAX;
    let mut first = true;
    while (out.len() as i64) < take {
        let level = match next_level(tx, queue, below, first, p).await? {
            Some(level) => level,
            None => break,
        };
        (below, first) = (level, false);
        let keys = keys_at(tx, queue, level, turn.as_deref(), p).await?;
        let rooms: Vec<(String, i64)> = keys
            .into_iter()
            .map(|k| {
                let room = i64::from(per_key) - running.get(&k).copied().unwrap_or(0);
                (k, room.min(take))
            })
            .filter(|(_, room)| *room > 0)
            .collect();
        let mut heads = vec![KeyHeads {
            key: None,
            tasks: unkeyed_heads(tx, queue, level, take, p).await?,
        }];
        heads.extend(keyed_heads(tx, queue, level, &rooms, p).await?);
        let want = (take - out.len() as i64) as usize;
        let (ids, last) = round_robin(&heads, want);
        for h in &heads {
            for (run_at, id) in h.tasks.iter().filter(|(_, id)| ids.contains(id)) {
                out.push(Key {
                    priority: level,
                    run_at: *run_at,
                    id: *id,
                });
                if let Some(key) = &h.key {
                    *running.entry(key.clone()).or_default() += 1;
                }
            }
        }
        if let Some(Some(key)) = last {
            turn = Some(key);
        }
    }
    if turn != *cursor {
        tx.execute(
            "UPDATE sked_queues SET key_cursor = $2 WHERE name = $1",
            &[&queue, &turn],
        )
        .await
        .map_err(db_err)?;
    }
    Ok(out)
}

/// The highest priority (below `below`, unless `first`) among the queue's available tasks the
/// claim may take.
async fn next_level(
    tx: &Transaction<'_>,
    queue: &str,
    below: i32,
    first: bool,
    p: &TaskClaimParams,
) -> Result<Option<i32>> {
    let mut params: Vec<Param<'_>> = vec![&queue, &below, &first];
    let filter = filters(p, 4, &mut params);
    let row = tx
        .query_opt(
            &format!(
                "SELECT priority FROM sked_tasks WHERE state = 'available' AND queue = $1 \
                 AND ($3 OR priority < $2){filter} ORDER BY priority DESC, run_at, id LIMIT 1"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    row.map(|r| col(&r, 0)).transpose()
}

/// The keys with available tasks at `level`, in turn order from after `cursor`: at most
/// [`KEYS_PER_CLAIM`].
async fn keys_at(
    tx: &Transaction<'_>,
    queue: &str,
    level: i32,
    cursor: Option<&str>,
    p: &TaskClaimParams,
) -> Result<Vec<String>> {
    let most = KEYS_PER_CLAIM as i64;
    let mut keys = keys_after(tx, queue, level, cursor.unwrap_or(""), most, p).await?;
    if let (Some(c), true) = (cursor, (keys.len() as i64) < most) {
        // Round again from the first key, up to the cursor.
        let from_start = keys_after(tx, queue, level, "", most - keys.len() as i64, p).await?;
        keys.extend(from_start.into_iter().filter(|k| k.as_str() <= c));
    }
    Ok(in_turn(keys, cursor))
}

/// At most `most` keys with available tasks at `level` after `after`, in key order: one probe
/// of the keyed index per key.
async fn keys_after(
    tx: &Transaction<'_>,
    queue: &str,
    level: i32,
    after: &str,
    most: i64,
    p: &TaskClaimParams,
) -> Result<Vec<String>> {
    let mut params: Vec<Param<'_>> = vec![&queue, &level, &after, &most];
    let filter = filters(p, 5, &mut params);
    let probe = |from: &str| {
        format!(
            "SELECT concurrency_key FROM sked_tasks WHERE state = 'available' \
             AND concurrency_key IS NOT NULL AND queue = $1 AND priority = $2 \
             AND concurrency_key > {from}{filter} ORDER BY concurrency_key LIMIT 1"
        )
    };
    let rows = tx
        .query(
            &format!(
                "WITH RECURSIVE k(key, n) AS (SELECT ({}), 1 \
                   UNION ALL SELECT ({}), k.n + 1 FROM k WHERE k.key IS NOT NULL AND k.n < $4::bigint) \
                 SELECT key FROM k WHERE key IS NOT NULL",
                probe("$3::text"),
                probe("k.key")
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| col(r, 0)).collect()
}

/// The first available tasks of each key at `level`, at most its room, in one statement.
async fn keyed_heads(
    tx: &Transaction<'_>,
    queue: &str,
    level: i32,
    rooms: &[(String, i64)],
    p: &TaskClaimParams,
) -> Result<Vec<KeyHeads>> {
    if rooms.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<String> = rooms.iter().map(|(k, _)| k.clone()).collect();
    let room: Vec<i64> = rooms.iter().map(|(_, r)| *r).collect();
    let mut params: Vec<Param<'_>> = vec![&queue, &level, &keys, &room];
    let filter = filters(p, 5, &mut params);
    let rows = tx
        .query(
            &format!(
                "SELECT u.ord, t.run_at, t.id \
                 FROM unnest($3::text[], $4::bigint[]) WITH ORDINALITY AS u(key, room, ord) \
                 CROSS JOIN LATERAL (SELECT run_at, id FROM sked_tasks \
                   WHERE state = 'available' AND concurrency_key IS NOT NULL AND queue = $1 \
                     AND priority = $2 AND concurrency_key = u.key{filter} \
                   ORDER BY run_at, id LIMIT u.room) t \
                 ORDER BY u.ord, t.run_at, t.id"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    let mut heads: Vec<KeyHeads> = rooms
        .iter()
        .map(|(k, _)| KeyHeads {
            key: Some(k.clone()),
            tasks: Vec::new(),
        })
        .collect();
    for row in &rows {
        let ord: i64 = col(row, 0)?;
        let task: (Timestamp, TaskId) = (col(row, 1)?, col(row, 2)?);
        heads[(ord - 1) as usize].tasks.push(task);
    }
    Ok(heads)
}

/// The first available tasks without a key at `level`, at most `most`, among the first
/// [`UNKEYED_LOOK`] of that priority (they have no index of their own).
async fn unkeyed_heads(
    tx: &Transaction<'_>,
    queue: &str,
    level: i32,
    most: i64,
    p: &TaskClaimParams,
) -> Result<Vec<(Timestamp, TaskId)>> {
    let mut params: Vec<Param<'_>> = vec![&queue, &level, &UNKEYED_LOOK, &most];
    let filter = filters(p, 5, &mut params);
    let rows = tx
        .query(
            &format!(
                "SELECT run_at, id FROM (SELECT run_at, id, concurrency_key FROM sked_tasks \
                   WHERE state = 'available' AND queue = $1 AND priority = $2{filter} \
                   ORDER BY priority DESC, run_at, id LIMIT $3) s \
                 WHERE concurrency_key IS NULL ORDER BY run_at, id LIMIT $4"
            ),
            &params,
        )
        .await
        .map_err(db_err)?;
    rows.iter().map(|r| Ok((col(r, 0)?, col(r, 1)?))).collect()
}
