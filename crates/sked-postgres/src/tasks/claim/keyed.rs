//! Claiming from a queue with a per-key limit, under its queue row's lock (see
//! [`super::limited`]): within each priority, keys take turns from after the key the last claim
//! served, and no key runs more than the limit at once.

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use jiff::Timestamp;
use sked_core::RateLimit;
use sked_core::TaskId;
use sked_store::keyed::{
    KEYS_PER_CLAIM, KeyHeads, KeyHolder, KeyLimits, Tally, UNKEYED_LOOK, holds_its_key, in_turn,
    round_robin,
};
use sked_store::states::Spelling;
use sked_store::*;

use super::positions::Key;
use crate::codec::{col, db_err};
use crate::tasks::Param;

/// The claim's filters (no task past its deadline, kinds, lowest priority) as SQL, their parameters pushed after those in
/// `params` (numbered on from them).
fn filters<'a>(p: &'a TaskClaimParams, params: &mut Vec<Param<'a>>) -> String {
    params.push(&p.now);
    let mut sql = format!(
        " AND {}",
        sked_store::expiry::startable(&format!("${}::timestamptz", params.len()))
    );
    if !p.kinds.is_empty() {
        params.push(&p.kinds);
        sql.push_str(&format!(" AND kind = ANY(${})", params.len()));
    }
    if let Some(min) = &p.min_priority {
        params.push(min);
        sql.push_str(&format!(" AND priority >= ${}", params.len()));
    }
    sql
}

/// The first tasks (at most `take`) a claim takes from `queue`, within the limits on each of
/// its keys: the highest priority first, keys in turn within it. Moves the queue's turn
/// (`cursor`, the last key served) on and logs each key's starts for its rate; also says when
/// the first key its rate held back may start again. The queue's row is locked by the caller.
pub(super) async fn candidates(
    tx: &Transaction<'_>,
    queue: &str,
    limits: KeyLimits,
    cursor: &Option<String>,
    take: i64,
    p: &TaskClaimParams,
) -> Result<(Vec<Key>, Option<Timestamp>)> {
    let mut tally = Tally {
        starts: match limits.rate {
            Some(rate) => key_starts(tx, queue, &rate, p.now).await?,
            None => HashMap::new(),
        },
        ..Tally::default()
    };
    for row in tx
        .query(
            "SELECT concurrency_key, count(*) FROM sked_tasks WHERE state = 'running' \
             AND queue = $1 AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
            &[&queue],
        )
        .await
        .map_err(db_err)?
    {
        tally.running.insert(col(&row, 0)?, col(&row, 1)?);
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
        let mut rooms: Vec<(String, i64)> = Vec::new();
        for k in keys {
            let room = tally.room(&limits, &k, p.now);
            if room > 0 {
                rooms.push((k, room.min(take)));
            }
        }
        let mut heads = vec![KeyHeads {
            key: None,
            tasks: unkeyed_heads(tx, queue, level, take, p).await?,
        }];
        if limits.strict {
            // A task that holds its key is the key's only one that may start.
            let keys: Vec<String> = rooms.iter().map(|(k, _)| k.clone()).collect();
            let holders = key_holders(&**tx, queue, &keys).await?;
            rooms.retain(|(k, _)| !holders.contains_key(k));
            heads.extend(holders.into_iter().map(|(key, h)| KeyHeads {
                key: Some(key),
                tasks: match h.claimable(i64::from(level), p) {
                    true => vec![(h.run_at, h.id)],
                    false => Vec::new(),
                },
            }));
        }
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
                    tally.took(key);
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
    if let Some(rate) = limits.rate {
        log_key_starts(tx, queue, &rate, &tally.started, p.now).await?;
    }
    Ok((out, tally.held_until))
}

/// Each key's starts in the window of `rate` that ends at `now`.
async fn key_starts(
    tx: &Transaction<'_>,
    queue: &str,
    rate: &RateLimit,
    now: Timestamp,
) -> Result<HashMap<String, Vec<(Timestamp, u32)>>> {
    let rows = tx
        .query(
            "SELECT concurrency_key, started_at, n FROM sked_queue_key_starts \
             WHERE queue = $1 AND started_at > $2",
            &[&queue, &rate.window_start(now)],
        )
        .await
        .map_err(db_err)?;
    let mut starts: HashMap<String, Vec<(Timestamp, u32)>> = HashMap::new();
    for r in &rows {
        let n: i32 = col(r, 2)?;
        starts
            .entry(col(r, 0)?)
            .or_default()
            .push((col(r, 1)?, n.max(0) as u32));
    }
    Ok(starts)
}

/// Logs this claim's starts, one row per key, and forgets those out of the window.
async fn log_key_starts(
    tx: &Transaction<'_>,
    queue: &str,
    rate: &RateLimit,
    started: &HashMap<String, u32>,
    now: Timestamp,
) -> Result<()> {
    let keys: Vec<String> = started.keys().cloned().collect();
    let counts: Vec<i32> = keys.iter().map(|k| started[k] as i32).collect();
    tx.execute(
        "WITH logged AS (INSERT INTO sked_queue_key_starts (queue, concurrency_key, started_at, n) \
           SELECT $1, k, $4, n FROM unnest($2::text[], $3::int[]) AS u(k, n)) \
         DELETE FROM sked_queue_key_starts WHERE queue = $1 AND started_at <= $5",
        &[&queue, &keys, &counts, &now, &rate.window_start(now)],
    )
    .await
    .map_err(db_err)?;
    Ok(())
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
    let filter = filters(p, &mut params);
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
    let filter = filters(p, &mut params);
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
    let filter = filters(p, &mut params);
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
    let filter = filters(p, &mut params);
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

/// The tasks that hold `keys` of `queue` in strict order, by key, in one statement.
pub(crate) async fn key_holders(
    c: &impl tokio_postgres::GenericClient,
    queue: &str,
    keys: &[String],
) -> Result<HashMap<String, KeyHolder>> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = c
        .query(
            &format!(
                "SELECT u.key, h.id, h.state, h.priority, h.kind, h.run_at \
                 FROM unnest($2::text[]) AS u(key) \
                 CROSS JOIN LATERAL (SELECT id, state, priority, kind, run_at FROM sked_tasks \
                   WHERE {} AND queue = $1 AND concurrency_key = u.key \
                   ORDER BY id LIMIT 1) h",
                holds_its_key(Spelling::InList)
            ),
            &[&queue, &keys],
        )
        .await
        .map_err(db_err)?;
    let mut holders = HashMap::new();
    for r in &rows {
        let state: String = col(r, 2)?;
        holders.insert(
            col(r, 0)?,
            KeyHolder {
                id: col(r, 1)?,
                state: crate::codec::state(&state)?,
                priority: col(r, 3)?,
                kind: col(r, 4)?,
                run_at: col(r, 5)?,
            },
        );
    }
    Ok(holders)
}
