//! Claiming from queues limited by a rate alone: the starts a claim may make are reserved in a
//! short transaction of their own under the queue row's lock, the tasks are claimed outside it,
//! side by side with other nodes' claims, and the claim's transaction corrects the reservation
//! to what it took.
//!
//! The lock only has to cover reading the rate window and logging the starts: the next claim
//! must see them before it counts. Under [`super::limited`]'s single transaction the lock is
//! also held while the tasks are found, locked and updated, so a queue's claims ran one at a
//! time even when its limit did not bind.
//!
//! Between the reservation and the claim's commit the window counts the whole reservation, so
//! a claim that takes fewer than it reserved (the queue ran short) holds back other nodes'
//! claims for that moment, never lets them exceed the limit. A claim that fails after reserving
//! leaves its reservation counted until it leaves the window: the limit errs on the safe side.
//!
//! A burst's token bucket cannot be given back exactly (the bucket may have filled meanwhile),
//! so queues with a burst, and those with a concurrency or per-key limit, which count running
//! tasks, keep to [`super::limited`].

use std::collections::HashMap;

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_store::*;

use crate::codec::{col, db_err};
use crate::tasks::Param;

/// The condition, on a queue row `q`, of a queue whose claims reserve their starts: a rate
/// limit without a burst, and no other limit.
pub(crate) const RATE_ONLY: &str = "(q.rate_limit IS NOT NULL AND q.rate_burst IS NULL \
    AND q.concurrency_limit IS NULL AND q.per_key_limit IS NULL \
    AND q.per_key_rate_limit IS NULL)";

/// The starts each queue `q`'s rate window counts at `$2`, as the arrays `w.at` and `w.n`
/// (read them with [`window_starts`]).
pub(super) const WINDOW: &str = "LEFT JOIN LATERAL ( \
    SELECT array_agg(s.started_at) AS at, array_agg(s.n) AS n \
    FROM sked_queue_starts s WHERE s.queue = q.name \
      AND s.started_at > $2::timestamptz - q.rate_period_ms * interval '1 millisecond' \
    ) w ON true";

/// The starts of a window from the columns of `coalesce(w.at, '{}')` and
/// `coalesce(w.n, '{}')` at `at` and `at + 1` (see [`WINDOW`]).
pub(super) fn window_starts(row: &tokio_postgres::Row, at: usize) -> Result<Vec<(Timestamp, u32)>> {
    let times: Vec<Timestamp> = col(row, at)?;
    let n: Vec<i32> = col(row, at + 1)?;
    Ok(times
        .into_iter()
        .zip(n.into_iter().map(|n| n.max(0) as u32))
        .collect())
}

/// Starts reserved for one queue's claim.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reservation {
    /// The row of the starts log that holds them.
    id: i64,
    /// How many.
    pub(super) take: i64,
}

/// Reserves, for each of `queues` (limited by a rate alone) that is not paused, the starts its
/// rate window has room for, at most `max`; also says when a queue without room frees.
pub(super) async fn reserve(
    c: &mut Object,
    queues: &Vec<String>,
    max: u32,
    now: Timestamp,
) -> Result<(HashMap<String, Reservation>, Option<Timestamp>)> {
    let tx = c.transaction().await.map_err(db_err)?;
    // The reservation need not wait for its commit to be flushed: the claim that uses it
    // commits later, synchronously, and its flush covers the reservation's WAL, written
    // before it. Should the server crash first, the reservation is lost with the claim.
    let columns = "q.name, q.rate_limit, q.rate_period_ms, \
        coalesce(w.at, '{}'), coalesce(w.n, '{}')";
    let (_, windows) = tokio::try_join!(
        async {
            tx.batch_execute("SET LOCAL synchronous_commit = off")
                .await
                .map_err(db_err)
        },
        lock_and_read(&tx, queues, RATE_ONLY, columns, now)
    )?;
    let mut wanted: Vec<(String, i32)> = Vec::new();
    let mut held_until = None;
    for row in &windows {
        let name: String = col(row, 0)?;
        let Some(rate) = sked_store::rate::from_columns(sked_store::rate::Columns {
            limit: col(row, 1)?,
            period_ms: col(row, 2)?,
            burst: None,
        }) else {
            continue;
        };
        let room = rate.room(&window_starts(row, 3)?, None, now);
        held_until = sked_store::rate::sooner(held_until, room.frees_at);
        let take = room.allowed.min(max);
        if take > 0 {
            wanted.push((name, i32::try_from(take).unwrap_or(i32::MAX)));
        }
    }
    let reserved = log(&tx, queues, &wanted, now).await?;
    tx.commit().await.map_err(db_err)?;
    Ok((reserved, held_until))
}

/// Logs the `wanted` starts at `now`, and forgets the starts of `queues` out of every window.
async fn log(
    tx: &Transaction<'_>,
    queues: &Vec<String>,
    wanted: &[(String, i32)],
    now: Timestamp,
) -> Result<HashMap<String, Reservation>> {
    let names: Vec<String> = wanted.iter().map(|(q, _)| q.clone()).collect();
    let counts: Vec<i32> = wanted.iter().map(|(_, n)| *n).collect();
    let stmt = tx
        .prepare_cached(
            "WITH logged AS ( \
               INSERT INTO sked_queue_starts (queue, started_at, n) \
               SELECT q, $3, n FROM unnest($1::text[], $2::int[]) AS l(q, n) \
               RETURNING queue, id, n), \
             gone AS ( \
               DELETE FROM sked_queue_starts s USING sked_queues q \
               WHERE s.queue = ANY($4) AND q.name = s.queue \
                 AND (q.rate_limit IS NULL \
                   OR s.started_at <= $3::timestamptz - q.rate_period_ms * interval '1 millisecond')) \
             SELECT queue, id, n FROM logged",
        )
        .await
        .map_err(db_err)?;
    let rows = tx
        .query(&stmt, &[&names, &counts, &now, queues])
        .await
        .map_err(db_err)?;
    rows.iter()
        .map(|row| {
            let n: i32 = col(row, 2)?;
            Ok((
                col(row, 0)?,
                Reservation {
                    id: col(row, 1)?,
                    take: i64::from(n),
                },
            ))
        })
        .collect()
}

/// Corrects each reservation to the starts its claim made (`started`, by queue), in the
/// claim's transaction; one that made none goes (an idle worker's claims would otherwise
/// leave a row each for as long as a quota's period).
pub(super) async fn give_back(
    tx: &Transaction<'_>,
    reserved: &HashMap<String, Reservation>,
    started: &HashMap<&str, i32>,
) -> Result<()> {
    let (mut ids, mut counts): (Vec<i64>, Vec<i32>) = (Vec::new(), Vec::new());
    for (queue, r) in reserved {
        let n = started.get(queue.as_str()).copied().unwrap_or(0);
        if i64::from(n) < r.take {
            ids.push(r.id);
            counts.push(n);
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "WITH g AS (SELECT * FROM unnest($1::bigint[], $2::int[]) AS g(id, n)), \
         gone AS (DELETE FROM sked_queue_starts s USING g WHERE s.id = g.id AND g.n = 0) \
         UPDATE sked_queue_starts s SET n = g.n FROM g WHERE s.id = g.id AND g.n > 0",
        &[&ids, &counts],
    )
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Locks the rows of the `queues` that are not paused and meet `cond` (on a queue row `q`),
/// and reads their `columns` (the rate window joined as `w`, see [`WINDOW`], at `now`).
pub(super) async fn lock_and_read(
    tx: &Transaction<'_>,
    queues: &[String],
    cond: &str,
    columns: &str,
    now: Timestamp,
) -> Result<Vec<tokio_postgres::Row>> {
    // The rows are locked first; then, in a statement of its own, each one's running tasks
    // and the starts its rate window counts are read. In one statement the counts would come
    // from the snapshot taken before the lock was granted, without what the claim that held
    // it had just committed, and nodes claiming at once would each take a full window. Sent
    // together, the second statement still runs after the first.
    let lock = tx
        .prepare_cached(&format!(
            "SELECT q.name FROM sked_queues q WHERE q.name = ANY($1) AND NOT q.paused \
               AND {cond} ORDER BY q.name FOR UPDATE"
        ))
        .await
        .map_err(db_err)?;
    let read = tx
        .prepare_cached(&format!(
            "SELECT {columns} FROM sked_queues q {WINDOW} \
             WHERE q.name = ANY($1) AND NOT q.paused AND {cond}"
        ))
        .await
        .map_err(db_err)?;
    let (lock_params, read_params): ([Param<'_>; 1], [Param<'_>; 2]) = ([&queues], [&queues, &now]);
    let (_, rows) = tokio::try_join!(tx.query(&lock, &lock_params), tx.query(&read, &read_params))
        .map_err(db_err)?;
    Ok(rows)
}
