//! Claiming from a queue with a per-key limit: within each priority, keys take turns (from
//! after the key the last claim served), and no key runs more than the limit at once.

use std::cmp::Reverse;
use std::collections::HashMap;

use jiff::Timestamp;
use rusqlite::OptionalExtension;
use rusqlite::{Transaction, params, params_from_iter, types::Value};
use sked_core::RateLimit;
use sked_core::TaskId;
use sked_store::keyed::{
    KEYS_PER_CLAIM, KeyHeads, KeyHolder, KeyLimits, Tally, UNKEYED_LOOK, in_turn, round_robin,
};
use sked_store::*;

use crate::codec::{db_err, from_ts, ts};
use crate::partial_indexes;

/// A claim's key: priority (highest first), run time, id.
type Key = (Reverse<i64>, i64, TaskId);

/// The claim's filters (kinds, lowest priority) as SQL numbered from `first`, and their values.
fn filters(p: &TaskClaimParams, first: usize) -> (String, Vec<Value>) {
    let (mut sql, mut values) = (String::new(), Vec::new());
    if !p.kinds.is_empty() {
        let marks: Vec<String> = (0..p.kinds.len())
            .map(|i| format!("?{}", first + i))
            .collect();
        sql.push_str(&format!(" AND kind IN ({})", marks.join(", ")));
        values.extend(p.kinds.iter().map(|k| Value::Text(k.clone())));
    }
    if let Some(min) = p.min_priority {
        sql.push_str(&format!(" AND priority >= ?{}", first + values.len()));
        values.push(Value::Integer(i64::from(min)));
    }
    (sql, values)
}

/// The first tasks (at most `take`) a claim takes from `queue`, within the limits on each of
/// its keys: the highest priority first, keys in turn within it. Moves the queue's turn on to
/// the last key served and logs each key's starts for its rate; also says when the first key
/// its rate held back may start again.
pub(super) fn claim_keys(
    tx: &Transaction<'_>,
    queue: &str,
    limits: KeyLimits,
    take: i64,
    p: &TaskClaimParams,
) -> Result<(Vec<Key>, Option<Timestamp>)> {
    let mut tally = Tally {
        starts: match limits.rate {
            Some(rate) => key_starts(tx, queue, &rate, p.now)?,
            None => HashMap::new(),
        },
        ..Tally::default()
    };
    {
        let mut stmt = tx
            .prepare_cached(
                "SELECT concurrency_key, count(*) FROM tasks WHERE state = 'running' \
                 AND queue = ?1 AND concurrency_key IS NOT NULL GROUP BY concurrency_key",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([queue], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db_err)?;
        for row in rows {
            let (key, n) = row.map_err(db_err)?;
            tally.running.insert(key, n);
        }
    }
    let cursor: Option<String> = tx
        .prepare_cached("SELECT key_cursor FROM queues WHERE name = ?1")
        .map_err(db_err)?
        .query_row([queue], |r| r.get(0))
        .map_err(db_err)?;
    let mut turn = cursor.clone();
    let mut out: Vec<Key> = Vec::new();
    // Priorities from the highest down, while the claim wants more.
    let mut below = i64::MAX;
    while (out.len() as i64) < take {
        let Some(level) = next_level(tx, queue, below, p)? else {
            break;
        };
        below = level;
        let keys = keys_at(tx, queue, level, turn.as_deref(), p)?;
        let mut heads = vec![KeyHeads {
            key: None,
            tasks: heads_of(tx, queue, level, None, take, p)?,
        }];
        for key in keys {
            let room = tally.room(&limits, &key, p.now);
            if room <= 0 {
                continue;
            }
            // In strict order, a task that holds its key is the key's only one that may start.
            let holder = match limits.strict {
                true => key_holder(tx, queue, &key)?,
                false => None,
            };
            let tasks = match holder {
                Some(h) if h.claimable(level, p) => vec![(h.run_at, h.id)],
                Some(_) => Vec::new(),
                None => heads_of(tx, queue, level, Some(&key), room.min(take), p)?,
            };
            heads.push(KeyHeads {
                key: Some(key),
                tasks,
            });
        }
        let want = (take - out.len() as i64) as usize;
        let (ids, last) = round_robin(&heads, want);
        for h in &heads {
            let taken = h.tasks.iter().filter(|(_, id)| ids.contains(id));
            for (run_at, id) in taken {
                out.push((Reverse(level), run_at.as_microsecond(), *id));
                if let Some(key) = &h.key {
                    tally.took(key);
                }
            }
        }
        if let Some(Some(key)) = last {
            turn = Some(key);
        }
    }
    if turn != cursor {
        tx.prepare_cached("UPDATE queues SET key_cursor = ?2 WHERE name = ?1")
            .map_err(db_err)?
            .execute(params![queue, turn])
            .map_err(db_err)?;
    }
    if let Some(rate) = limits.rate {
        log_key_starts(tx, queue, &rate, &tally.started, p.now)?;
    }
    out.sort_unstable();
    Ok((out, tally.held_until))
}

/// Each key's starts in the window of `rate` that ends at `now`.
fn key_starts(
    tx: &Transaction<'_>,
    queue: &str,
    rate: &RateLimit,
    now: Timestamp,
) -> Result<HashMap<String, Vec<(Timestamp, u32)>>> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT concurrency_key, started_at, n FROM queue_key_starts \
             WHERE queue = ?1 AND started_at > ?2",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![queue, ts(rate.window_start(now))], |r| {
            Ok((
                r.get::<_, String>(0)?,
                from_ts(r.get(1)?),
                r.get::<_, u32>(2)?,
            ))
        })
        .map_err(db_err)?;
    let mut starts: HashMap<String, Vec<(Timestamp, u32)>> = HashMap::new();
    for row in rows {
        let (key, at, n) = row.map_err(db_err)?;
        starts.entry(key).or_default().push((at, n));
    }
    Ok(starts)
}

/// Logs this claim's starts, one row per key, and forgets those out of the window.
fn log_key_starts(
    tx: &Transaction<'_>,
    queue: &str,
    rate: &RateLimit,
    started: &HashMap<String, u32>,
    now: Timestamp,
) -> Result<()> {
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO queue_key_starts (queue, concurrency_key, started_at, n) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(db_err)?;
    for (key, n) in started {
        insert
            .execute(params![queue, key, ts(now), n])
            .map_err(db_err)?;
    }
    tx.prepare_cached("DELETE FROM queue_key_starts WHERE queue = ?1 AND started_at <= ?2")
        .map_err(db_err)?
        .execute(params![queue, ts(rate.window_start(now))])
        .map_err(db_err)?;
    Ok(())
}

/// The highest priority below `below` among the queue's available tasks the claim may take.
fn next_level(
    tx: &Transaction<'_>,
    queue: &str,
    below: i64,
    p: &TaskClaimParams,
) -> Result<Option<i64>> {
    let (filter, values) = filters(p, 3);
    let args = [Value::Text(queue.into()), Value::Integer(below)]
        .into_iter()
        .chain(values);
    let mut stmt = tx
        .prepare_cached(&partial_indexes::keyed_level(&filter))
        .map_err(db_err)?;
    let mut rows = stmt.query(params_from_iter(args)).map_err(db_err)?;
    match rows.next().map_err(db_err)? {
        Some(r) => Ok(Some(r.get(0).map_err(db_err)?)),
        None => Ok(None),
    }
}

/// The keys with available tasks at `level`, in turn order from after `cursor`: at most
/// [`KEYS_PER_CLAIM`].
fn keys_at(
    tx: &Transaction<'_>,
    queue: &str,
    level: i64,
    cursor: Option<&str>,
    p: &TaskClaimParams,
) -> Result<Vec<String>> {
    let (filter, values) = filters(p, 5);
    let mut stmt = tx
        .prepare_cached(&partial_indexes::keyed_keys(&filter))
        .map_err(db_err)?;
    let mut read = |after: &str, most: usize| -> Result<Vec<String>> {
        let args = [
            Value::Text(queue.into()),
            Value::Integer(level),
            Value::Text(after.into()),
            Value::Integer(most as i64),
        ]
        .into_iter()
        .chain(values.iter().cloned());
        let rows = stmt
            .query_map(params_from_iter(args), |r| r.get::<_, String>(0))
            .map_err(db_err)?;
        rows.map(|r| r.map_err(db_err)).collect()
    };
    let mut keys = read(cursor.unwrap_or(""), KEYS_PER_CLAIM)?;
    if let (Some(c), true) = (cursor, keys.len() < KEYS_PER_CLAIM) {
        // Round again from the first key, up to the cursor.
        let from_start = read("", KEYS_PER_CLAIM - keys.len())?;
        keys.extend(from_start.into_iter().filter(|k| k.as_str() <= c));
    }
    Ok(in_turn(keys, cursor))
}

/// The task that holds `key` of `queue` in strict order, if one does.
pub(crate) fn key_holder(
    conn: &rusqlite::Connection,
    queue: &str,
    key: &str,
) -> Result<Option<KeyHolder>> {
    conn.prepare_cached(&partial_indexes::KEY_HOLDER)
        .map_err(db_err)?
        .query_row(params![queue, key], |r| {
            Ok(KeyHolder {
                id: r.get(0)?,
                state: crate::codec::state(&r.get::<_, String>(1)?)?,
                priority: r.get(2)?,
                kind: r.get(3)?,
                run_at: from_ts(r.get(4)?),
            })
        })
        .optional()
        .map_err(db_err)
}

/// The first available tasks of `key` (`None`: without a key) at `level`, at most `most`.
fn heads_of(
    tx: &Transaction<'_>,
    queue: &str,
    level: i64,
    key: Option<&str>,
    most: i64,
    p: &TaskClaimParams,
) -> Result<Vec<(jiff::Timestamp, TaskId)>> {
    let (filter, values) = filters(p, 5);
    let (sql, third) = match key {
        Some(k) => (partial_indexes::keyed_heads(&filter), Value::Text(k.into())),
        None => (
            partial_indexes::unkeyed_heads(&filter),
            Value::Integer(UNKEYED_LOOK),
        ),
    };
    let args = [
        Value::Text(queue.into()),
        Value::Integer(level),
        third,
        Value::Integer(most),
    ]
    .into_iter()
    .chain(values);
    let mut stmt = tx.prepare_cached(&sql).map_err(db_err)?;
    let rows = stmt
        .query_map(params_from_iter(args), |r| {
            Ok((from_ts(r.get(0)?), r.get(1)?))
        })
        .map_err(db_err)?;
    rows.map(|r| r.map_err(db_err)).collect()
}
