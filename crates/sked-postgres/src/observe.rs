//! What the dashboard and `sked top` read besides tasks and schedules: ended work per time
//! bucket, and the workers and nodes alive.

use std::collections::BTreeMap;

use deadpool_postgres::Object;
use jiff::Timestamp;
use sked_store::*;

use crate::codec::{col, db_err};

/// The bucket of a time `finished_at` since `$1`, buckets `$2` µs wide.
const BUCKET_OF: &str = "(extract(epoch FROM (finished_at - $1)) * 1000000)::bigint / $2::bigint";

/// Ended tasks per bucket and state since `$1`, buckets `$2` µs wide.
pub(crate) static ENDED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT {BUCKET_OF}, state, count(*) FROM f GROUP BY 1, 2",
        // `OFFSET 0` keeps each queue's and state's read apart: joined into one, they were
        // read as a scan of the whole index.
        crate::tasks::finished_since_by_queue("t.state, t.finished_at", "$1", "OFFSET 0")
    )
});

/// Ended tasks since `$1`, at most `$2`: kind, state, and how long they ran (ms).
pub(crate) static ENDED_RUNS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH RECURSIVE {} SELECT kind, state, \
           (extract(epoch FROM (finished_at - started_at)) * 1000)::bigint FROM f LIMIT $2",
        crate::tasks::finished_since_by_queue(
            "t.kind, t.state, t.started_at, t.finished_at",
            "$1",
            "OFFSET 0"
        )
    )
});

/// Ended tasks and failed attempts since `p.since`, at most `p.limit` of each.
pub(crate) async fn run_samples(
    c: &mut Object,
    p: &sked_store::kinds::RunSamplesParams,
) -> Result<Vec<sked_store::kinds::RunSample>> {
    use sked_store::kinds::{RunEnd, RunSample};
    let limit = i64::from(p.limit);
    let attempts = "SELECT t.kind, 'failed', \
           (extract(epoch FROM (a.finished_at - a.started_at)) * 1000)::bigint \
         FROM sked_task_attempts a JOIN sked_tasks t ON t.id = a.task_id \
         WHERE a.outcome = 'failed' AND a.finished_at >= $1 LIMIT $2";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&p.since, &limit];
    let (ended, failed) = tokio::try_join!(
        c.query(ENDED_RUNS.as_str(), &params),
        c.query(attempts, &params),
    )
    .map_err(db_err)?;
    let mut out = Vec::with_capacity(ended.len() + failed.len());
    for r in ended.iter().chain(&failed) {
        let end: String = col(r, 1)?;
        out.push(RunSample {
            kind: col(r, 0)?,
            end: match end.as_str() {
                "succeeded" => RunEnd::Succeeded,
                "dead" => RunEnd::Dead,
                "failed" => RunEnd::Failed,
                "expired" => RunEnd::Expired,
                _ => RunEnd::Cancelled,
            },
            run_ms: col(r, 2)?,
        });
    }
    Ok(out)
}

pub(crate) async fn activity(c: &mut Object, p: &ActivityParams) -> Result<Vec<ActivityBucket>> {
    let width = p.bucket.as_micros().max(1) as i64;
    let failed_sql = format!(
        "SELECT {BUCKET_OF}, 'failed', count(*) FROM sked_task_attempts \
         WHERE outcome = 'failed' AND finished_at >= $1 GROUP BY 1"
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&p.since, &width];
    let (ended, failed) = tokio::try_join!(
        c.query(ENDED.as_str(), &params),
        c.query(failed_sql.as_str(), &params),
    )
    .map_err(db_err)?;
    let mut buckets: BTreeMap<i64, ActivityBucket> = BTreeMap::new();
    for r in ended.iter().chain(&failed) {
        let i: i64 = col(r, 0)?;
        let what: String = col(r, 1)?;
        let n = col::<i64>(r, 2)? as u64;
        let b = buckets.entry(i).or_insert_with(|| ActivityBucket {
            start: p.since + p.bucket * i32::try_from(i).unwrap_or(i32::MAX),
            ..ActivityBucket::default()
        });
        match what.as_str() {
            "succeeded" => b.succeeded += n,
            "dead" => b.dead += n,
            "cancelled" => b.cancelled += n,
            "expired" => b.expired += n,
            _ => b.failed += n,
        }
    }
    Ok(buckets.into_values().collect())
}

pub(crate) async fn worker_beat(c: &mut Object, p: &WorkerBeatParams) -> Result<()> {
    let concurrency = p.concurrency.map(|n| i32::try_from(n).unwrap_or(i32::MAX));
    let stmt = c
        .prepare_cached(
            "INSERT INTO sked_workers (id, role, queues, concurrency, started_at, last_seen_at, stopped_at) \
             VALUES ($1, $2, $3, $4, $5::timestamptz, $5::timestamptz, \
             CASE WHEN $6::boolean THEN $5::timestamptz END) \
             ON CONFLICT (id) DO UPDATE SET role = excluded.role, queues = excluded.queues, \
             concurrency = coalesce(excluded.concurrency, sked_workers.concurrency), last_seen_at = excluded.last_seen_at, \
             stopped_at = excluded.stopped_at",
        )
        .await
        .map_err(db_err)?;
    c.execute(
        &stmt,
        &[&p.id, &p.role, &p.queues, &concurrency, &p.now, &p.stopping],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

pub(crate) async fn worker_list(c: &mut Object, p: &WorkerListParams) -> Result<Page<WorkerInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    // One row more than the page: it says whether more follow.
    let rows = i64::from(limit) + 1;
    let since: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&p.seen_since, &rows];
    let (running, workers) = tokio::try_join!(
        c.query(
            "SELECT worker, count(*) FROM sked_tasks WHERE state = 'running' AND worker IS NOT NULL \
             GROUP BY worker",
            &[]
        ),
        c.query(
            "SELECT id, role, queues, concurrency, started_at, last_seen_at, stopped_at \
             FROM sked_workers WHERE last_seen_at >= $1 ORDER BY last_seen_at DESC, id \
             LIMIT $2",
            &since
        ),
    )
    .map_err(db_err)?;
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in &running {
        counts.insert(col(r, 0)?, col::<i64>(r, 1)? as u64);
    }
    let mut page = sked_store::page::PageBuilder::new(limit);
    for r in &workers {
        let id: String = col(r, 0)?;
        let w = WorkerInfo {
            running: counts.get(&id).copied().unwrap_or(0),
            id,
            role: col(r, 1)?,
            queues: col(r, 2)?,
            concurrency: col::<Option<i32>>(r, 3)?.map(|n| n.max(0) as u32),
            started_at: col(r, 4)?,
            last_seen_at: col(r, 5)?,
            stopped_at: col(r, 6)?,
        };
        if !page.push(w) {
            break;
        }
    }
    Ok(page.finish())
}

pub(crate) async fn worker_prune(c: &mut Object, before: Timestamp) -> Result<u64> {
    let stmt = c
        .prepare_cached("DELETE FROM sked_workers WHERE last_seen_at < $1")
        .await
        .map_err(db_err)?;
    c.execute(&stmt, &[&before]).await.map_err(db_err)
}
