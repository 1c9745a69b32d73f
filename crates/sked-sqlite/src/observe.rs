//! What the dashboard and `sked top` read besides tasks and schedules: ended work per time
//! bucket, and the workers and nodes alive.

use std::collections::BTreeMap;

use rusqlite::{Connection, Transaction, params};
use sked_store::*;

use crate::codec::{db_err, from_ts, opt_ts, ts};

pub(crate) fn activity(conn: &Connection, p: &ActivityParams) -> Result<Vec<ActivityBucket>> {
    let (since, width) = (ts(p.since), p.bucket.as_micros().max(1) as i64);
    let mut buckets: BTreeMap<i64, ActivityBucket> = BTreeMap::new();
    fn bucket(
        buckets: &mut BTreeMap<i64, ActivityBucket>,
        i: i64,
        since: i64,
        width: i64,
    ) -> &mut ActivityBucket {
        buckets.entry(i).or_insert_with(|| ActivityBucket {
            start: from_ts(since + i * width),
            ..ActivityBucket::default()
        })
    }
    let mut stmt = conn
        .prepare_cached(&crate::partial_indexes::ACTIVITY)
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![since, width], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })
        .map_err(db_err)?;
    for row in rows {
        let (i, st, n) = row.map_err(db_err)?;
        let b = bucket(&mut buckets, i, since, width);
        let n = n as u64;
        match st.as_str() {
            "succeeded" => b.succeeded += n,
            "dead" => b.dead += n,
            "expired" => b.expired += n,
            _ => b.cancelled += n,
        }
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT (finished_at - ?1) / ?2, count(*) FROM task_attempts \
             WHERE outcome = 'failed' AND finished_at >= ?1 GROUP BY 1",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![since, width], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
        })
        .map_err(db_err)?;
    for row in rows {
        let (i, n) = row.map_err(db_err)?;
        bucket(&mut buckets, i, since, width).failed += n as u64;
    }
    Ok(buckets.into_values().collect())
}

pub(crate) fn worker_beat(tx: &Transaction<'_>, p: &WorkerBeatParams) -> Result<()> {
    let queues = serde_json::to_string(&p.queues).expect("strings serialise");
    let now = ts(p.now);
    tx.execute(
        "INSERT INTO workers (id, role, queues, concurrency, started_at, last_seen_at, stopped_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, CASE WHEN ?6 THEN ?5 END) \
         ON CONFLICT (id) DO UPDATE SET role = excluded.role, queues = excluded.queues, \
         concurrency = coalesce(excluded.concurrency, workers.concurrency), last_seen_at = excluded.last_seen_at, \
         stopped_at = excluded.stopped_at",
        params![p.id, p.role, queues, p.concurrency, now, p.stopping],
    )
    .map_err(db_err)?;
    Ok(())
}

pub(crate) fn worker_list(conn: &Connection, p: &WorkerListParams) -> Result<Page<WorkerInfo>> {
    let limit = p.limit.clamp(1, rules::STORE_LIST_LIMIT_MAX);
    let mut running: BTreeMap<String, u64> = BTreeMap::new();
    let mut stmt = conn
        .prepare_cached(
            "SELECT worker, count(*) FROM tasks WHERE state = 'running' AND worker IS NOT NULL \
             GROUP BY worker",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
        .map_err(db_err)?;
    for row in rows {
        let (w, n) = row.map_err(db_err)?;
        running.insert(w, n as u64);
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, role, queues, concurrency, started_at, last_seen_at, stopped_at \
             FROM workers WHERE last_seen_at >= ?1 ORDER BY last_seen_at DESC, id LIMIT ?2",
        )
        .map_err(db_err)?;
    // One row more than the page: it says whether more follow.
    let rows = stmt
        .query_map(params![ts(p.seen_since), i64::from(limit) + 1], |r| {
            Ok(WorkerInfo {
                id: r.get(0)?,
                role: r.get(1)?,
                queues: serde_json::from_str(&r.get::<_, String>(2)?).unwrap_or_default(),
                concurrency: r.get(3)?,
                started_at: from_ts(r.get(4)?),
                last_seen_at: from_ts(r.get(5)?),
                stopped_at: opt_ts(r.get(6)?),
                running: 0,
            })
        })
        .map_err(db_err)?;
    let mut page = sked_store::page::PageBuilder::new(limit);
    for row in rows {
        let mut w = row.map_err(db_err)?;
        w.running = running.get(&w.id).copied().unwrap_or(0);
        if !page.push(w) {
            break;
        }
    }
    Ok(page.finish())
}

pub(crate) fn worker_prune(tx: &Transaction<'_>, before: jiff::Timestamp) -> Result<u64> {
    let n = tx
        .execute("DELETE FROM workers WHERE last_seen_at < ?1", [ts(before)])
        .map_err(db_err)?;
    Ok(n as u64)
}

/// Ended tasks and failed attempts since `p.since`, at most `p.limit` of each.
pub(crate) fn run_samples(
    conn: &Connection,
    p: &sked_store::kinds::RunSamplesParams,
) -> Result<Vec<sked_store::kinds::RunSample>> {
    use sked_store::kinds::{RunEnd, RunSample};
    let ran = |start: Option<i64>, end: Option<i64>| match (start, end) {
        (Some(s), Some(e)) => Some((e - s) / 1000),
        _ => None,
    };
    let mut out = Vec::new();
    let mut stmt = conn
        .prepare_cached(&crate::partial_indexes::ENDED_RUNS)
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![ts(p.since), p.limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<i64>>(2)?,
                r.get::<_, Option<i64>>(3)?,
            ))
        })
        .map_err(db_err)?;
    for row in rows {
        let (kind, state, start, end) = row.map_err(db_err)?;
        let end_as = match state.as_str() {
            "succeeded" => RunEnd::Succeeded,
            "dead" => RunEnd::Dead,
            "expired" => RunEnd::Expired,
            _ => RunEnd::Cancelled,
        };
        out.push(RunSample {
            kind,
            end: end_as,
            run_ms: ran(start, end),
        });
    }
    let mut stmt = conn
        .prepare_cached(
            "SELECT t.kind, a.started_at, a.finished_at FROM task_attempts a \
             JOIN tasks t ON t.id = a.task_id \
             WHERE a.outcome = 'failed' AND a.finished_at >= ?1 LIMIT ?2",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![ts(p.since), p.limit], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<i64>>(1)?,
                r.get::<_, Option<i64>>(2)?,
            ))
        })
        .map_err(db_err)?;
    for row in rows {
        let (kind, start, end) = row.map_err(db_err)?;
        out.push(RunSample {
            kind,
            end: RunEnd::Failed,
            run_ms: ran(start, end),
        });
    }
    Ok(out)
}
