//! Queues (pause, concurrency limit, counts) and named leases.

use std::collections::BTreeMap;

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_core::validate_name;
use sked_store::*;

use crate::codec::{db_err, from_ts, state, ts};

/// Every queue that has tasks (found by skipping through the `(queue, state)` index, one probe
/// per queue), each state counted up to a limit: bounded by queues × states × limit, however
/// many finished tasks are kept.
const COUNTS: &str = "WITH RECURSIVE queues(name) AS ( \
      SELECT (SELECT queue FROM tasks ORDER BY queue LIMIT 1) \
      UNION ALL \
      SELECT (SELECT t.queue FROM tasks t WHERE t.queue > q.name ORDER BY t.queue LIMIT 1) \
      FROM queues q WHERE q.name IS NOT NULL), \
    states(state) AS (VALUES ('scheduled'), ('available'), ('running'), ('retrying'), \
      ('succeeded'), ('dead'), ('cancelled')) \
    SELECT q.name, s.state, (SELECT count(*) FROM ( \
      SELECT 1 FROM tasks t WHERE t.queue = q.name AND t.state = s.state LIMIT ?1)) \
    FROM queues q CROSS JOIN states s WHERE q.name IS NOT NULL";

/// One queue's states, each counted up to a limit.
const QUEUE_COUNTS: &str = "WITH states(state) AS (VALUES ('scheduled'), ('available'), \
      ('running'), ('retrying'), ('succeeded'), ('dead'), ('cancelled')) \
    SELECT s.state, (SELECT count(*) FROM ( \
      SELECT 1 FROM tasks t WHERE t.queue = ?1 AND t.state = s.state LIMIT ?2)) \
    FROM states s";

/// `LIMIT` for counting up to `limit`: one more, to know whether there are more.
fn probe(limit: u64) -> i64 {
    i64::try_from(limit.min(QUEUE_COUNT_LIMIT_MAX)).unwrap_or(i64::MAX) + 1
}

pub(crate) fn list(conn: &Connection, count_limit: u64) -> Result<Vec<QueueInfo>> {
    let mut queues: BTreeMap<String, QueueInfo> = BTreeMap::new();
    let mut stmt = conn
        .prepare_cached("SELECT name, paused, concurrency_limit FROM queues")
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |r| Ok(QueueInfo::new(r.get(0)?, r.get(1)?, r.get(2)?)))
        .map_err(db_err)?;
    for q in rows {
        let q = q.map_err(db_err)?;
        queues.insert(q.name.clone(), q);
    }
    let mut stmt = conn.prepare_cached(COUNTS).map_err(db_err)?;
    let rows = stmt
        .query_map([probe(count_limit)], |r| {
            Ok((
                r.get::<_, String>(0)?,
                state(&r.get::<_, String>(1)?)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(db_err)?;
    for row in rows {
        let (queue, st, n) = row.map_err(db_err)?;
        queues
            .entry(queue.clone())
            .or_insert_with(|| QueueInfo::new(queue, false, None))
            .set_count(st, n as u64, count_limit);
    }
    Ok(queues.into_values().collect())
}

pub(crate) fn update(tx: &Transaction<'_>, p: &QueueUpdateParams) -> Result<QueueInfo> {
    validate_name("queue", &p.name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let now = ts(Timestamp::now());
    tx.execute(
        "INSERT INTO queues (name, updated_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        params![p.name, now],
    )
    .map_err(db_err)?;
    if let Some(paused) = p.paused {
        tx.execute(
            "UPDATE queues SET paused = ?2, updated_at = ?3 WHERE name = ?1",
            params![p.name, paused, now],
        )
        .map_err(db_err)?;
    }
    if let Some(limit) = p.concurrency_limit {
        tx.execute(
            "UPDATE queues SET concurrency_limit = ?2, updated_at = ?3 WHERE name = ?1",
            params![p.name, limit, now],
        )
        .map_err(db_err)?;
    }
    let (paused, concurrency_limit) = tx
        .query_row(
            "SELECT paused, concurrency_limit FROM queues WHERE name = ?1",
            [&p.name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(db_err)?;
    let mut info = QueueInfo::new(p.name.clone(), paused, concurrency_limit);
    let mut stmt = tx.prepare_cached(QUEUE_COUNTS).map_err(db_err)?;
    let rows = stmt
        .query_map(params![p.name, probe(QUEUE_COUNT_LIMIT)], |r| {
            Ok((state(&r.get::<_, String>(0)?)?, r.get::<_, i64>(1)?))
        })
        .map_err(db_err)?;
    for row in rows {
        let (st, n) = row.map_err(db_err)?;
        info.set_count(st, n as u64, QUEUE_COUNT_LIMIT);
    }
    Ok(info)
}

fn lease_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        name: r.get(0)?,
        holder: r.get(1)?,
        token: r.get(2)?,
        expires_at: from_ts(r.get(3)?),
    })
}

pub(crate) fn lease_acquire(tx: &Transaction<'_>, p: &LeaseAcquireParams) -> Result<Option<Lease>> {
    let now = ts(p.now);
    let expires = ts(p
        .now
        .checked_add(p.ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?);
    // Take it when free or expired (a new token), renew it when already ours (same token).
    tx.prepare_cached(
        "INSERT INTO leases (name, holder, token, expires_at) VALUES (?1, ?2, 1, ?3) \
         ON CONFLICT (name) DO UPDATE SET \
           token = CASE WHEN leases.holder = excluded.holder AND leases.expires_at >= ?4 THEN leases.token ELSE leases.token + 1 END, \
           holder = excluded.holder, expires_at = excluded.expires_at \
         WHERE leases.holder = excluded.holder OR leases.expires_at < ?4",
    )
    .map_err(db_err)?
    .execute(params![p.name, p.holder, expires, now])
    .map_err(db_err)?;
    let lease = tx
        .query_row(
            "SELECT name, holder, token, expires_at FROM leases WHERE name = ?1",
            [&p.name],
            lease_row,
        )
        .map_err(db_err)?;
    Ok((lease.holder == p.holder).then_some(lease))
}

pub(crate) fn lease_release(tx: &Transaction<'_>, name: &str, holder: &str) -> Result<()> {
    // Expire it rather than delete it, so the token keeps growing.
    tx.execute(
        "UPDATE leases SET expires_at = 0 WHERE name = ?1 AND holder = ?2",
        params![name, holder],
    )
    .map_err(db_err)?;
    Ok(())
}

pub(crate) fn lease_get(conn: &Connection, name: &str, now: Timestamp) -> Result<Option<Lease>> {
    conn.query_row(
        "SELECT name, holder, token, expires_at FROM leases WHERE name = ?1 AND expires_at >= ?2",
        params![name, ts(now)],
        lease_row,
    )
    .optional()
    .map_err(db_err)
}
