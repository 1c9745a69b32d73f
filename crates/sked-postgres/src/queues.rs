//! Queues (pause, concurrency and rate limits, counts) and named leases.

use std::collections::HashMap;

use deadpool_postgres::Object;
use jiff::Timestamp;
use sked_core::validate_name;
use sked_store::page::PageBuilder;
use sked_store::states::Spelling;
use sked_store::*;

use crate::codec::{col, db_err};
use crate::tasks::announce_tasks;

fn queue_info(name: String, paused: bool, limit: Option<i32>) -> QueueInfo {
    QueueInfo::new(name, paused, limit.map(|l| l.max(0) as u32))
}

/// A row of [`counts::queue_counts_sql`] or [`counts::queue_page_sql`]: the counts follow
/// the queue.
fn counts_of(r: &tokio_postgres::Row) -> Result<[i64; counts::COUNTS]> {
    let mut n = [0i64; counts::COUNTS];
    for (i, v) in n.iter_mut().enumerate() {
        *v = col(r, i + 1)?;
    }
    Ok(n)
}

pub(crate) async fn list(c: &mut Object, p: &QueueListParams) -> Result<Page<QueueInfo>> {
    use futures_util::TryStreamExt;
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let stmt = c
        .prepare_cached(&counts::queue_page_sql(
            "sked_tasks",
            Some("sked_stages"),
            "sked_queues",
            Spelling::InList,
            counts::PagePlaceholders {
                after: "$1::text",
                rows: "$2",
                count_probe: "$3",
            },
        ))
        .await
        .map_err(db_err)?;
    let after = p.after.as_deref().unwrap_or("");
    // One row more than the page: it says whether more follow.
    let rows = i64::from(limit) + 1;
    let probe = counts::limit_probe(p.count_limit);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&after, &rows, &probe];
    let rows = c
        .query_raw(&stmt, params.iter().copied())
        .await
        .map_err(db_err)?;
    futures_util::pin_mut!(rows);
    let mut page = PageBuilder::new(limit);
    let mut buckets: HashMap<String, Timestamp> = HashMap::new();
    while let Some(r) = rows.try_next().await.map_err(db_err)? {
        let mut q = queue_info(
            col(&r, 0)?,
            col(&r, counts::SETTINGS_AT)?,
            col(&r, counts::SETTINGS_AT + 1)?,
        );
        settings_from(&mut q, &r, counts::SETTINGS_AT + 2)?;
        q.set_counts(counts_of(&r)?, p.count_limit);
        if let Some(bucket) = col::<Option<Timestamp>>(&r, counts::SETTINGS_AT + 5)? {
            buckets.insert(q.name.clone(), bucket);
        }
        if !page.push(q) {
            break;
        }
    }
    let mut page = page.finish();
    set_held(&***c, &mut page.items, &buckets, p.now).await?;
    set_keys_stopped(&***c, &mut page.items).await?;
    Ok(page)
}

/// Notes each queue's rate window and why its tasks wait ([`QueueInfo::set_held`]), reading
/// the rate-limited queues' windows in one statement; `buckets` holds their burst buckets.
async fn set_held(
    c: &impl tokio_postgres::GenericClient,
    queues: &mut [QueueInfo],
    buckets: &HashMap<String, Timestamp>,
    now: Timestamp,
) -> Result<()> {
    let rated: Vec<&str> = queues
        .iter()
        .filter(|q| q.rate.is_some())
        .map(|q| q.name.as_str())
        .collect();
    let mut starts: HashMap<String, Vec<(Timestamp, u32)>> = HashMap::new();
    if !rated.is_empty() {
        let rows = c
            .query(
                "SELECT s.queue, s.started_at, s.n FROM sked_queue_starts s \
                 JOIN sked_queues q ON q.name = s.queue \
                 WHERE s.queue = ANY($1) \
                   AND s.started_at > $2::timestamptz - q.rate_period_ms * interval '1 millisecond'",
                &[&rated, &now],
            )
            .await
            .map_err(db_err)?;
        for r in &rows {
            let n: i32 = col(r, 2)?;
            starts
                .entry(col(r, 0)?)
                .or_default()
                .push((col(r, 1)?, n.max(0) as u32));
        }
    }
    for q in queues {
        let window = starts.get(&q.name).map_or(&[][..], Vec::as_slice);
        q.set_held(window, buckets.get(&q.name).copied(), now);
    }
    Ok(())
}

pub(crate) async fn update(
    c: &mut Object,
    channel: &str,
    p: &QueueUpdateParams,
) -> Result<QueueInfo> {
    validate_name("queue", &p.name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let limit: Option<Option<i32>> = p
        .concurrency_limit
        .map(|l| l.map(|n| i32::try_from(n).unwrap_or(i32::MAX)));
    let rate = sked_store::rate::to_columns(p.rate.flatten());
    let per_key: Option<Option<i32>> = p
        .per_key
        .map(|l| l.map(|n| i32::try_from(n).unwrap_or(i32::MAX)));
    let key_rate = sked_store::rate::to_columns(p.per_key_rate.flatten());
    let tx = c.transaction().await.map_err(db_err)?;
    if p.must_exist && presence(&*tx, &p.name).await? == (false, false) {
        return Err(StoreError::queue_not_found(&p.name));
    }
    tx.execute(
        "INSERT INTO sked_queues AS q \
               (name, paused, concurrency_limit, rate_limit, rate_period_ms, rate_burst, \
                per_key_limit, per_key_rate_limit, per_key_rate_period_ms, updated_at) \
             VALUES ($1, coalesce($2, false), $4, $6, $7, $8, $10, $12, $13, now()) \
             ON CONFLICT (name) DO UPDATE SET \
               paused = coalesce($2, q.paused), \
               concurrency_limit = CASE WHEN $3 THEN $4 ELSE q.concurrency_limit END, \
               rate_limit = CASE WHEN $5 THEN $6 ELSE q.rate_limit END, \
               rate_period_ms = CASE WHEN $5 THEN $7 ELSE q.rate_period_ms END, \
               rate_burst = CASE WHEN $5 THEN $8 ELSE q.rate_burst END, \
               rate_bucket_at = CASE WHEN $5 THEN NULL ELSE q.rate_bucket_at END, \
               per_key_limit = CASE WHEN $9 THEN $10 ELSE q.per_key_limit END, \
               per_key_rate_limit = CASE WHEN $11 THEN $12 ELSE q.per_key_rate_limit END, \
               per_key_rate_period_ms = CASE WHEN $11 THEN $13 ELSE q.per_key_rate_period_ms END, \
               updated_at = now()",
        &[
            &p.name,
            &p.paused,
            &limit.is_some(),
            &limit.flatten(),
            &p.rate.is_some(),
            &rate.limit,
            &rate.period_ms,
            &rate.burst,
            &per_key.is_some(),
            &per_key.flatten(),
            &p.per_key_rate.is_some(),
            &key_rate.limit,
            &key_rate.period_ms,
        ],
    )
    .await
    .map_err(db_err)?;
    if let Some(order) = p.key_order {
        let column = (order == KeyOrder::Strict).then_some(order.as_str());
        tx.execute(
            "UPDATE sked_queues SET key_order = $2, updated_at = now() WHERE name = $1",
            &[&p.name, &column],
        )
        .await
        .map_err(db_err)?;
    }
    if let Some(b) = &p.backoff {
        tx.execute(
            "UPDATE sked_queues SET backoff = $2, updated_at = now() WHERE name = $1",
            &[&p.name, &b.as_ref().map(|b| b.to_string())],
        )
        .await
        .map_err(db_err)?;
    }
    for (column, ms) in sked_store::retention::column_changes(&p.retention)? {
        tx.execute(
            &format!("UPDATE sked_queues SET {column} = $2, updated_at = now() WHERE name = $1"),
            &[&p.name, &ms],
        )
        .await
        .map_err(db_err)?;
    }
    let row = tx
        .query_one(SETTINGS.as_str(), &[&p.name])
        .await
        .map_err(db_err)?;
    if p.per_key_rate == Some(None) {
        tx.execute(
            "DELETE FROM sked_queue_key_starts WHERE queue = $1",
            &[&p.name],
        )
        .await
        .map_err(db_err)?;
    }
    if p.rate == Some(None) {
        // Removed: its window's starts no longer count.
        tx.execute("DELETE FROM sked_queue_starts WHERE queue = $1", &[&p.name])
            .await
            .map_err(db_err)?;
    }
    // A limited queue's tasks are claimed by a walk of its rows.
    crate::tasks::kept_stages::make_released_rows_if_limited(&*tx, &p.name).await?;
    let counts = one_queue_counts(&*tx, &p.name).await?;
    let mut info = queue_info(p.name.clone(), col(&row, 0)?, col(&row, 1)?);
    settings_from(&mut info, &row, 2)?;
    info.set_counts(counts, QUEUE_COUNT_LIMIT);
    sked_store::keyed::check_order(info.per_key, info.key_order)?;
    set_keys_stopped(&*tx, std::slice::from_mut(&mut info)).await?;
    // A resumed or widened queue may have claimable tasks.
    announce_tasks(&*tx, channel, None, None).await?;
    tx.commit().await.map_err(db_err)?;
    // Fresh statistics keep claims walking the claim index (see `tasks::claim::sql::claim_sql`).
    // The change is committed: a failure here is only worth a warning.
    if let Err(e) = c.batch_execute("ANALYZE sked_queues").await {
        tracing::warn!(error = %e, "cannot analyze sked_queues; claims may plan badly");
    }
    if let Some(now) = p.now {
        let mut buckets = HashMap::new();
        if let Some(bucket) = col::<Option<Timestamp>>(&row, 5)? {
            buckets.insert(info.name.clone(), bucket);
        }
        set_held(&***c, std::slice::from_mut(&mut info), &buckets, now).await?;
    }
    Ok(info)
}

/// In the queues with strict order per key, counts the keys a dead task stops.
async fn set_keys_stopped(
    c: &impl tokio_postgres::GenericClient,
    queues: &mut [QueueInfo],
) -> Result<()> {
    for q in queues
        .iter_mut()
        .filter(|q| q.key_order == KeyOrder::Strict)
    {
        let sql = counts::keys_stopped_sql("sked_tasks", "$1", "$2", Spelling::InList);
        let row = c
            .query_one(&sql, &[&q.name, &(QUEUE_COUNT_LIMIT as i64)])
            .await
            .map_err(db_err)?;
        q.keys_stopped = Some(col::<i64>(&row, 0)?.max(0) as u64);
    }
    Ok(())
}

/// Whether the queue has a row of settings, and whether any task is in it.
async fn presence<C: tokio_postgres::GenericClient + Sync>(
    c: &C,
    name: &str,
) -> Result<(bool, bool)> {
    let probe = format!(
        "SELECT EXISTS (SELECT 1 FROM sked_queues WHERE name = $1), ({})",
        counts::queue_has_tasks_sql(
            "sked_tasks",
            Some("sked_stages"),
            "$1::text",
            Spelling::InList
        )
    );
    let row = c.query_one(&probe, &[&name]).await.map_err(db_err)?;
    Ok((col(&row, 0)?, col(&row, 1)?))
}

pub(crate) async fn remove(c: &mut Object, name: &str) -> Result<()> {
    validate_name("queue", name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let tx = c.transaction().await.map_err(db_err)?;
    // A task enqueued meanwhile, unseen here, finds the queue without settings: as if it
    // had come just after the removal.
    match presence(&*tx, name).await? {
        (false, false) => Err(StoreError::queue_not_found(name)),
        (_, true) => Err(StoreError::Conflict(format!(
            "queue {name} has tasks; it leaves the list once none is left"
        ))),
        (true, false) => {
            for (table, column) in [
                ("sked_queues", "name"),
                ("sked_queue_starts", "queue"),
                ("sked_queue_key_starts", "queue"),
            ] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE {column} = $1"),
                    &[&name],
                )
                .await
                .map_err(db_err)?;
            }
            tx.commit().await.map_err(db_err)
        }
    }
}

fn lease_row(r: &tokio_postgres::Row) -> Result<Lease> {
    Ok(Lease {
        name: col(r, 0)?,
        holder: col(r, 1)?,
        token: col(r, 2)?,
        expires_at: col(r, 3)?,
    })
}

pub(crate) async fn lease_acquire(c: &mut Object, p: &LeaseAcquireParams) -> Result<Option<Lease>> {
    let expires = p
        .now
        .checked_add(p.ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    // Take it when free or expired (a new token), renew it when already ours (same token).
    let stmt = c
        .prepare_cached(
            "INSERT INTO sked_leases AS l (name, holder, token, expires_at) VALUES ($1, $2, 1, $3) \
             ON CONFLICT (name) DO UPDATE SET \
               token = CASE WHEN l.holder = excluded.holder AND l.expires_at >= $4 \
                 THEN l.token ELSE l.token + 1 END, \
               holder = excluded.holder, expires_at = excluded.expires_at \
             WHERE l.holder = excluded.holder OR l.expires_at < $4 \
             RETURNING name, holder, token, expires_at",
        )
        .await
        .map_err(db_err)?;
    let row = c
        .query_opt(&stmt, &[&p.name, &p.holder, &expires, &p.now])
        .await
        .map_err(db_err)?;
    row.as_ref().map(lease_row).transpose()
}

pub(crate) async fn lease_release(
    c: &mut Object,
    channel: &str,
    name: &str,
    holder: &str,
) -> Result<()> {
    // Expire it rather than delete it, so the token keeps growing; tell the followers.
    let tx = c.transaction().await.map_err(db_err)?;
    let n = tx
        .execute(
            "UPDATE sked_leases SET expires_at = 'epoch' WHERE name = $1 AND holder = $2",
            &[&name, &holder],
        )
        .await
        .map_err(db_err)?;
    if n > 0 {
        let payload = format!("l{name}");
        tx.execute("SELECT pg_notify($1, $2)", &[&channel, &payload])
            .await
            .map_err(db_err)?;
    }
    tx.commit().await.map_err(db_err)
}

pub(crate) async fn lease_get(c: &mut Object, name: &str, now: Timestamp) -> Result<Option<Lease>> {
    let stmt = c
        .prepare_cached(
            "SELECT name, holder, token, expires_at FROM sked_leases WHERE name = $1 AND expires_at >= $2",
        )
        .await
        .map_err(db_err)?;
    let row = c.query_opt(&stmt, &[&name, &now]).await.map_err(db_err)?;
    row.as_ref().map(lease_row).transpose()
}

/// One queue's settings and counts, and at `now` why its tasks wait; a queue never set or used
/// has none.
/// A queue some task or setting names; another is not found.
pub(crate) async fn get(c: &mut Object, name: &str, now: Timestamp) -> Result<QueueInfo> {
    if presence(&***c, name).await? == (false, false) {
        return Err(StoreError::queue_not_found(name));
    }
    let row = c
        .query_opt(SETTINGS.as_str(), &[&name])
        .await
        .map_err(db_err)?;
    let counts = one_queue_counts(&***c, name).await?;
    let mut info = QueueInfo::new(name.to_string(), false, None);
    let mut buckets = HashMap::new();
    if let Some(row) = &row {
        info = queue_info(name.to_string(), col(row, 0)?, col(row, 1)?);
        settings_from(&mut info, row, 2)?;
        if let Some(bucket) = col::<Option<Timestamp>>(row, 5)? {
            buckets.insert(info.name.clone(), bucket);
        }
    }
    info.set_counts(counts, QUEUE_COUNT_LIMIT);
    set_held(&***c, std::slice::from_mut(&mut info), &buckets, now).await?;
    set_keys_stopped(&***c, std::slice::from_mut(&mut info)).await?;
    Ok(info)
}

/// A queue's settings, as [`settings_from`] reads them from the third column on.
static SETTINGS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT paused, concurrency_limit, rate_limit, rate_period_ms, rate_burst, \
           rate_bucket_at, per_key_limit, per_key_rate_limit, per_key_rate_period_ms, {}, \
           backoff, key_order FROM sked_queues WHERE name = $1",
        sked_store::retention::COLUMNS.join(", ")
    )
});

/// The rate, per-key and retention settings of a queue row whose rate columns start at `at`
/// (rate limit, period, burst, bucket, per-key limit, per-key rate limit and period, then the
/// retentions, then the backoff and the key order).
fn settings_from(info: &mut QueueInfo, row: &tokio_postgres::Row, at: usize) -> Result<()> {
    info.backoff = rules::queue_backoff_of_column(col(row, at + 11)?)?;
    info.key_order = match col::<Option<String>>(row, at + 12)? {
        None => KeyOrder::Priority,
        Some(s) => s.parse().map_err(StoreError::Backend)?,
    };
    info.retention = sked_store::retention::QueueRetention::from_columns([
        col(row, at + 7)?,
        col(row, at + 8)?,
        col(row, at + 9)?,
        col(row, at + 10)?,
    ]);
    info.rate = sked_store::rate::from_columns(sked_store::rate::Columns {
        limit: col(row, at)?,
        period_ms: col(row, at + 1)?,
        burst: col(row, at + 2)?,
    });
    info.per_key = col::<Option<i32>>(row, at + 4)?.map(|n| n.max(0) as u32);
    info.per_key_rate = sked_store::rate::from_columns(sked_store::rate::Columns {
        limit: col(row, at + 5)?,
        period_ms: col(row, at + 6)?,
        burst: None,
    });
    Ok(())
}

pub(crate) async fn key_usage(
    c: &mut Object,
    p: &sked_store::keyed::KeyUsageParams,
) -> Result<sked_store::keyed::KeyUsage> {
    let running = c
        .query_one(
            "SELECT count(*) FROM sked_tasks WHERE state = 'running' AND queue = $1 \
             AND concurrency_key = $2",
            &[&p.queue, &p.key],
        )
        .await
        .map_err(db_err)?;
    let rows = c
        .query(
            "SELECT started_at, n FROM sked_queue_key_starts WHERE queue = $1 \
             AND concurrency_key = $2 AND started_at > $3",
            &[&p.queue, &p.key, &p.since],
        )
        .await
        .map_err(db_err)?;
    let starts = rows
        .iter()
        .map(|r| Ok((col(r, 0)?, col::<i32>(r, 1)?.max(0) as u32)))
        .collect::<Result<_>>()?;
    let holder = match p.strict {
        false => None,
        true => {
            let key = [p.key.clone()];
            let holders = crate::tasks::claim::key_holders(&***c, &p.queue, &key).await?;
            holders.into_values().next().map(|h| h.behind())
        }
    };
    Ok(sked_store::keyed::KeyUsage {
        running: col(&running, 0)?,
        starts,
        holder,
    })
}

/// One queue's counts per state, each up to [`QUEUE_COUNT_LIMIT`].
async fn one_queue_counts<C: tokio_postgres::GenericClient + Sync>(
    c: &C,
    name: &str,
) -> Result<[i64; counts::COUNTS]> {
    let counting = counts::queue_counts_sql(
        "sked_tasks",
        Some("sked_stages"),
        "$2",
        "$1::text",
        Spelling::InList,
    );
    let row = c
        .query_one(
            counting.as_str(),
            &[&name, &counts::limit_probe(QUEUE_COUNT_LIMIT)],
        )
        .await
        .map_err(db_err)?;
    counts_of(&row)
}
