//! Queues (pause, concurrency and rate limits, counts) and named leases.

use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use sked_core::validate_name;
use sked_store::page::PageBuilder;
use sked_store::*;

use crate::codec::{db_err, from_ts, ts};

/// A row of [`counts::queue_counts_sql`] or [`counts::queue_page_sql`]: the queue, then the counts in `TaskState::ALL` order.
fn counts_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, [i64; counts::COUNTS])> {
    let mut n = [0i64; counts::COUNTS];
    for (i, v) in n.iter_mut().enumerate() {
        *v = r.get(i + 1)?;
    }
    Ok((r.get(0)?, n))
}

pub(crate) fn remove(tx: &Transaction<'_>, name: &str) -> Result<()> {
    validate_name("queue", name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    match presence(tx, name)? {
        (false, false) => Err(StoreError::queue_not_found(name)),
        (_, true) => Err(StoreError::Conflict(format!(
            "queue {name} has tasks; it leaves the list once none is left"
        ))),
        (true, false) => {
            for table in ["queues", "queue_starts", "queue_key_starts"] {
                let column = if table == "queues" { "name" } else { "queue" };
                tx.execute(&format!("DELETE FROM {table} WHERE {column} = ?1"), [name])
                    .map_err(db_err)?;
            }
            Ok(())
        }
    }
}

pub(crate) fn list(conn: &Connection, p: &QueueListParams) -> Result<Page<QueueInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let mut stmt = conn
        .prepare_cached(&crate::partial_indexes::QUEUE_PAGE)
        .map_err(db_err)?;
    // One row more than the page: it says whether more follow.
    let rows = stmt
        .query_map(
            params![
                p.after.as_deref().unwrap_or(""),
                i64::from(limit) + 1,
                counts::limit_probe(p.count_limit)
            ],
            |r| {
                let (name, n) = counts_row(r)?;
                let mut q = QueueInfo::new(
                    name,
                    r.get(counts::SETTINGS_AT)?,
                    r.get(counts::SETTINGS_AT + 1)?,
                );
                q.rate = sked_store::rate::from_columns(sked_store::rate::Columns {
                    limit: r.get(counts::SETTINGS_AT + 2)?,
                    period_ms: r.get(counts::SETTINGS_AT + 3)?,
                    burst: r.get(counts::SETTINGS_AT + 4)?,
                });
                q.per_key = r.get(counts::SETTINGS_AT + 6)?;
                q.per_key_rate = sked_store::rate::from_columns(sked_store::rate::Columns {
                    limit: r.get(counts::SETTINGS_AT + 7)?,
                    period_ms: r.get(counts::SETTINGS_AT + 8)?,
                    burst: None,
                });
                q.retention = retention_from(r, counts::SETTINGS_AT + 9)?;
                q.backoff = backoff_from(r, counts::SETTINGS_AT + 13)?;
                q.key_order = key_order_from(r, counts::SETTINGS_AT + 14)?;
                q.set_counts(n, p.count_limit);
                Ok((
                    q,
                    r.get::<_, Option<i64>>(counts::SETTINGS_AT + 5)?
                        .map(from_ts),
                ))
            },
        )
        .map_err(db_err)?;
    let mut page = PageBuilder::new(limit);
    for row in rows {
        let (mut q, bucket) = row.map_err(db_err)?;
        let starts = match &q.rate {
            Some(rate) => crate::tasks::claim::starts(conn, &q.name, rate, p.now)?,
            None => Vec::new(),
        };
        q.set_held(&starts, bucket, p.now);
        set_keys_stopped(conn, &mut q)?;
        if !page.push(q) {
            break;
        }
    }
    Ok(page.finish())
}

/// Whether the queue has a row of settings, and whether any task is in it.
fn presence(conn: &Connection, name: &str) -> Result<(bool, bool)> {
    let settings = conn
        .query_row("SELECT 1 FROM queues WHERE name = ?1", [name], |_| Ok(()))
        .optional()
        .map_err(db_err)?
        .is_some();
    let tasks = conn
        .prepare_cached(&crate::partial_indexes::QUEUE_HAS_TASKS)
        .and_then(|mut s| s.query_row([name], |r| r.get(0)))
        .map_err(db_err)?;
    Ok((settings, tasks))
}

pub(crate) fn update(tx: &Transaction<'_>, p: &QueueUpdateParams) -> Result<QueueInfo> {
    validate_name("queue", &p.name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    if p.must_exist && presence(tx, &p.name)? == (false, false) {
        return Err(StoreError::queue_not_found(&p.name));
    }
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
    if let Some(per_key) = p.per_key {
        tx.execute(
            "UPDATE queues SET per_key_limit = ?2, updated_at = ?3 WHERE name = ?1",
            params![p.name, per_key, now],
        )
        .map_err(db_err)?;
    }
    if let Some(order) = p.key_order {
        let column = (order == KeyOrder::Strict).then_some(order.as_str());
        tx.execute(
            "UPDATE queues SET key_order = ?2, updated_at = ?3 WHERE name = ?1",
            params![p.name, column, now],
        )
        .map_err(db_err)?;
    }
    if let Some(b) = &p.backoff {
        tx.execute(
            "UPDATE queues SET backoff = ?2, updated_at = ?3 WHERE name = ?1",
            params![p.name, b.as_ref().map(|b| b.to_string()), now],
        )
        .map_err(db_err)?;
    }
    for (column, ms) in sked_store::retention::column_changes(&p.retention)? {
        tx.execute(
            &format!("UPDATE queues SET {column} = ?2, updated_at = ?3 WHERE name = ?1"),
            params![p.name, ms, now],
        )
        .map_err(db_err)?;
    }
    if let Some(rate) = p.per_key_rate {
        let c = sked_store::rate::to_columns(rate);
        tx.execute(
            "UPDATE queues SET per_key_rate_limit = ?2, per_key_rate_period_ms = ?3, \
             updated_at = ?4 WHERE name = ?1",
            params![p.name, c.limit, c.period_ms, now],
        )
        .map_err(db_err)?;
        if rate.is_none() {
            tx.execute("DELETE FROM queue_key_starts WHERE queue = ?1", [&p.name])
                .map_err(db_err)?;
        }
    }
    if let Some(rate) = p.rate {
        let c = sked_store::rate::to_columns(rate);
        tx.execute(
            "UPDATE queues SET rate_limit = ?2, rate_period_ms = ?3, rate_burst = ?4, \
             rate_bucket_at = NULL, updated_at = ?5 WHERE name = ?1",
            params![p.name, c.limit, c.period_ms, c.burst, now],
        )
        .map_err(db_err)?;
        if rate.is_none() {
            // Removed: its window's starts no longer count.
            tx.execute("DELETE FROM queue_starts WHERE queue = ?1", [&p.name])
                .map_err(db_err)?;
        }
    }
    let info = info(tx, &p.name, p.now)?;
    sked_store::keyed::check_order(info.per_key, info.key_order)?;
    Ok(info)
}

/// A queue row's key order, from column `at` (`NULL`: by priority).
fn key_order_from(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<KeyOrder> {
    match r.get::<_, Option<String>>(at)? {
        None => Ok(KeyOrder::Priority),
        Some(s) => s.parse().map_err(|e: String| {
            rusqlite::Error::InvalidColumnType(at, e, rusqlite::types::Type::Text)
        }),
    }
}

/// In a queue with strict order per key, counts the keys a dead task stops.
fn set_keys_stopped(conn: &Connection, q: &mut QueueInfo) -> Result<()> {
    if q.key_order == KeyOrder::Strict {
        let n: i64 = conn
            .prepare_cached(&crate::partial_indexes::KEYS_STOPPED)
            .map_err(db_err)?
            .query_row(params![q.name, QUEUE_COUNT_LIMIT as i64], |r| r.get(0))
            .map_err(db_err)?;
        q.keys_stopped = Some(n.max(0) as u64);
    }
    Ok(())
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

/// One queue's settings and counts, and (at `now`) why its tasks wait; a queue never set or
/// used has none.
/// A queue some task or setting names; another is not found.
pub(crate) fn get(conn: &Connection, name: &str, now: Timestamp) -> Result<QueueInfo> {
    if presence(conn, name)? == (false, false) {
        return Err(StoreError::queue_not_found(name));
    }
    info(conn, name, Some(now))
}

/// The retentions of a queue row, from column `at` on.
fn backoff_from(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Option<sked_core::Backoff>> {
    sked_store::rules::queue_backoff_of_column(r.get::<_, Option<String>>(at)?.as_deref()).map_err(
        |e| rusqlite::Error::InvalidColumnType(at, e.to_string(), rusqlite::types::Type::Text),
    )
}

fn retention_from(
    r: &rusqlite::Row<'_>,
    at: usize,
) -> rusqlite::Result<sked_store::retention::QueueRetention> {
    Ok(sked_store::retention::QueueRetention::from_columns([
        r.get(at)?,
        r.get(at + 1)?,
        r.get(at + 2)?,
        r.get(at + 3)?,
    ]))
}

pub(crate) fn info(conn: &Connection, name: &str, now: Option<Timestamp>) -> Result<QueueInfo> {
    let (paused, concurrency_limit, rate, per_key, retention) = conn
        .query_row(
            &format!(
                "SELECT paused, concurrency_limit, rate_limit, rate_period_ms, rate_burst, \
                 rate_bucket_at, per_key_limit, per_key_rate_limit, per_key_rate_period_ms, {}, \
                 backoff, key_order FROM queues WHERE name = ?1",
                sked_store::retention::COLUMNS.join(", ")
            ),
            [name],
            |r| {
                let rate = sked_store::rate::from_columns(sked_store::rate::Columns {
                    limit: r.get(2)?,
                    period_ms: r.get(3)?,
                    burst: r.get(4)?,
                });
                let per_key_rate = sked_store::rate::from_columns(sked_store::rate::Columns {
                    limit: r.get(7)?,
                    period_ms: r.get(8)?,
                    burst: None,
                });
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    (rate, r.get::<_, Option<i64>>(5)?),
                    (r.get(6)?, per_key_rate, key_order_from(r, 14)?),
                    (retention_from(r, 9)?, backoff_from(r, 13)?),
                ))
            },
        )
        .optional()
        .map_err(db_err)?
        .unwrap_or((
            false,
            None,
            (None, None),
            (None, None, KeyOrder::Priority),
            (Default::default(), None),
        ));
    let (rate, bucket) = rate;
    let mut info = QueueInfo::new(name.to_string(), paused, concurrency_limit);
    info.rate = rate;
    (info.per_key, info.per_key_rate, info.key_order) = per_key;
    (info.retention, info.backoff) = retention;
    let (_, n) = conn
        .prepare_cached(&crate::partial_indexes::QUEUE_COUNTS)
        .map_err(db_err)?
        .query_row(
            params![name, counts::limit_probe(QUEUE_COUNT_LIMIT)],
            counts_row,
        )
        .map_err(db_err)?;
    info.set_counts(n, QUEUE_COUNT_LIMIT);
    set_keys_stopped(conn, &mut info)?;
    if let Some(now) = now {
        let starts = match &info.rate {
            Some(rate) => crate::tasks::claim::starts(conn, &info.name, rate, now)?,
            None => Vec::new(),
        };
        info.set_held(&starts, bucket.map(from_ts), now);
    }
    Ok(info)
}

pub(crate) fn key_usage(
    conn: &Connection,
    p: &sked_store::keyed::KeyUsageParams,
) -> Result<sked_store::keyed::KeyUsage> {
    let running: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM tasks WHERE state = 'running' AND queue = ?1 \
             AND concurrency_key = ?2",
        )
        .map_err(db_err)?
        .query_row(params![p.queue, p.key], |r| r.get(0))
        .map_err(db_err)?;
    let mut stmt = conn
        .prepare_cached(
            "SELECT started_at, n FROM queue_key_starts WHERE queue = ?1 \
             AND concurrency_key = ?2 AND started_at > ?3",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![p.queue, p.key, ts(p.since)], |r| {
            Ok((from_ts(r.get(0)?), r.get::<_, u32>(1)?))
        })
        .map_err(db_err)?;
    let starts = rows.collect::<rusqlite::Result<_>>().map_err(db_err)?;
    let holder = match p.strict {
        false => None,
        true => crate::tasks::claim::key_holder(conn, &p.queue, &p.key)?.map(|h| h.behind()),
    };
    Ok(sked_store::keyed::KeyUsage {
        running,
        starts,
        holder,
    })
}
