//! Claiming tasks (staging due ones first) and extending leases.

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::{Object, Pool};
use jiff::Timestamp;
use sked_core::Task;
use sked_store::keyed;
use sked_store::states::WAITING;
use sked_store::*;

use super::Param;
use super::cursor::{ClaimCursors, Key, NextDue, QueueSetting};
use super::known::Limited;
use crate::codec::{TASK_COLUMNS, col, db_err, tasks_from_rows};
use crate::listen::notify_tasks_sql;

/// Due scheduled/retrying tasks become available (`$1` the channel, `$2` now), at most
/// [`STAGE_BATCH`], and are announced by their highest priority and earliest run time. One
/// row: that priority and run time (null when none was due), how many, and when the next
/// waiting task is due. Rows another node is staging are skipped.
static STAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH staged AS ( \
           UPDATE sked_tasks SET state = 'available' WHERE id IN ( \
             SELECT id FROM sked_tasks WHERE state IN {WAITING} AND run_at <= $2 \
             ORDER BY run_at LIMIT {STAGE_BATCH} FOR UPDATE SKIP LOCKED) \
           RETURNING priority, run_at) \
         SELECT f.top, f.first, f.n, \
           (SELECT min(run_at) FROM sked_tasks WHERE state IN {WAITING} AND run_at > $2), \
           CASE WHEN f.n > 0 THEN {} END \
         FROM (SELECT max(priority) AS top, min(run_at) AS first, count(*) AS n FROM staged) f",
        notify_tasks_sql("f.first", "f.top", "NULL::timestamptz")
    )
});

/// At most this many tasks staged per claim.
const STAGE_BATCH: i64 = 10_000;

/// Keeps the planner from reading the staging and claim statements' rows through a bitmap:
/// set before them and reset after, on the same connection, in the same round trip.
///
/// Both walk an index in order and stop after a batch. PostgreSQL chooses between that walk
/// and a bitmap read of every matching row, sorted, by how many rows its statistics say
/// match. Before the table is first analyzed (a new deployment's first bulk enqueue, until
/// autovacuum gets to it) it guesses a few hundred, and the bitmap read looks cheaper: it
/// read and sorted every available task for each claim, 180–220 ms per claim of 1,000 among
/// 200,000 just enqueued, where the walk takes a few. Once analyzed, the statistics lead to
/// the walk (even when they say that no task is available), or to the bitmap read only when
/// about as many rows match as a batch takes, where both cost the same.
pub(crate) const ORDERED_WALK: &str = "SET enable_bitmapscan = off";
/// Ends [`ORDERED_WALK`].
pub(crate) const ORDERED_WALK_END: &str = "RESET enable_bitmapscan";

/// Candidates `c` of a queue that is neither paused nor limited.
static OPEN: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "NOT EXISTS (SELECT 1 FROM sked_queues q WHERE q.name = c.queue AND {})",
        keyed::LIMITED_OR_PAUSED
    )
});

/// Paused queues and queues with a concurrency, rate or per-key limit (whether limited, and
/// whether by a rate alone).
static QUEUE_SETTINGS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT q.name, q.paused, CASE WHEN {} THEN {} END \
         FROM sked_queues q WHERE {}",
        keyed::LIMITED,
        super::rated::RATE_ONLY,
        keyed::LIMITED_OR_PAUSED
    )
});

/// The claim of the first available tasks that match `filter` (`$1` now, `$2` the lease's end,
/// `$3` the worker, `$4` at most how many, `$5` the timeout grace in milliseconds), in claim
/// order. Queues that are paused or limited are left to the slow path ([`claim_limited`]).
///
/// With `after`, the claim starts after the claim-order key (`$6` priority, `$7` run time,
/// `$8` id) where the store's previous claim ended (see [`super::cursor`]): the rest of that
/// priority, then the lower ones.
///
/// The planner costs the `NOT EXISTS` from `sked_queues`' statistics. Without any (the table
/// is small and changes seldom, so autovacuum seldom analyzes it) it assumed a table of some
/// size, chose a hash anti-join and read and sorted every available task for each claim (a
/// claim of 1,000 among 250,000 available took 435 ms, against 60 ms walking the claim index
/// in order). So the migrations and every change of queue settings analyze `sked_queues`
/// ([`crate::queues::update`]). A scalar subquery per candidate instead of `NOT EXISTS` did not
/// depend on the statistics, but cost a fifth of the drain's throughput.
///
/// `open`: among the queues that are neither paused nor limited; otherwise every queue of
/// `filter` (a walk of one limited queue, see [`super::limited`]).
pub(crate) fn claim_sql(filter: &str, after: bool, open: bool) -> String {
    let open = match open {
        true => OPEN.as_str(),
        false => "true",
    };
    let picked = match after {
        false => format!(
            "picked AS (SELECT id FROM sked_tasks c WHERE {filter} AND {open} \
               ORDER BY priority DESC, run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)"
        ),
        true => format!(
            "same AS (SELECT id FROM sked_tasks c WHERE {filter} AND priority = $6 \
               AND (run_at, id) > ($7, $8) AND {open} \
               ORDER BY run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED), \
             lower AS (SELECT id FROM sked_tasks c WHERE {filter} AND priority < $6 AND {open} \
               ORDER BY priority DESC, run_at, id LIMIT $4 - (SELECT count(*) FROM same) \
               FOR UPDATE SKIP LOCKED), \
             picked AS (SELECT id FROM same UNION ALL SELECT id FROM lower)"
        ),
    };
    let lease = lease_end_sql("$1", "$2", "$5");
    format!(
        "WITH {picked} \
         UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, started_at = $1, \
           lease_expires_at = {lease}, worker = $3, cancel_requested = false \
         FROM picked WHERE t.id = picked.id RETURNING {TASK_COLUMNS}"
    )
}

/// The end of the lease of task `t` started at `start`, asked until `wanted`: never past its
/// timeout and the grace (`grace`, milliseconds) after the start, as [`rules::lease_end`] says.
pub(super) fn lease_end_sql(start: &str, wanted: &str, grace: &str) -> String {
    format!(
        "CASE WHEN t.timeout_ms IS NULL THEN {wanted}::timestamptz \
           ELSE LEAST({wanted}::timestamptz, \
             {start}::timestamptz + (t.timeout_ms + {grace}::bigint) * interval '1 millisecond') END"
    )
}

/// The timeout grace in whole milliseconds, as the lease statements take it: between zero and
/// the longest duration sked takes, so that the sum with a timeout stays in range.
pub(crate) fn grace_ms(grace: jiff::SignedDuration) -> i64 {
    let most = sked_core::MAX_DURATION.as_millis();
    i64::try_from(grace.as_millis().clamp(0, most)).unwrap_or(0)
}

/// The queues and kinds of a claim, as its position and its turns know them.
pub(crate) fn filter_key(p: &TaskClaimParams) -> String {
    format!("{:?} {:?}", p.queues, p.kinds)
}

pub(crate) async fn claim(
    c: &mut Object,
    pool: &Pool,
    channel: &str,
    cursors: &Arc<ClaimCursors>,
    p: &TaskClaimParams,
) -> Result<(Vec<Task>, Option<Timestamp>)> {
    loop {
        if let Some(claimed) = claim_from_position(c, pool, channel, cursors, p).await? {
            return Ok(claimed);
        }
    }
}

/// One claim from the store's position for `p`'s queues and kinds; `None` when that position
/// was the end and staging made tasks available before it: claim again, from them.
///
/// At the end, the claim statement would find nothing, and a claim from the front would walk,
/// with a snapshot held, every task claimed since (a node whose worker keeps up with a steady
/// load is at the end whenever its staging runs, once a second). So staging runs alone, and
/// when it makes tasks available the claim starts again just before them.
async fn claim_from_position(
    c: &mut Object,
    pool: &Pool,
    channel: &str,
    cursors: &Arc<ClaimCursors>,
    p: &TaskClaimParams,
) -> Result<Option<(Vec<Task>, Option<Timestamp>)>> {
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let max = i64::from(p.max);
    let filter_key = filter_key(p);
    // Staging and the queue settings only when they may have changed (see `super::known`).
    let (stage_first, known_settings) = cursors.before_claim(p.now);
    let start = cursors.start(&filter_key, p.now);
    let after = start.after;
    let at_end = after == Some(Key::END);
    if start.probe {
        let (pool, cursors) = (pool.clone(), cursors.clone());
        tokio::spawn(probe(pool, cursors, filter_key, after, p.clone(), true));
    }
    let grace = grace_ms(p.timeout_grace);
    let mut params: Vec<Param<'_>> = vec![&p.now, &expires, &p.worker, &max, &grace];
    if let Some(key) = &after {
        params.extend([&key.priority as Param<'_>, &key.run_at, &key.id]);
    }
    let filter = candidates_filter(&p.queues, &p.kinds, &p.min_priority, &mut params);
    let sql = claim_sql(&filter, after.is_some(), true);
    let stage = c.prepare_cached(&STAGE).await.map_err(db_err)?;
    let settings = c.prepare_cached(&QUEUE_SETTINGS).await.map_err(db_err)?;
    let take = c.prepare_cached(&sql).await.map_err(db_err)?;
    let stage_params: [Param<'_>; 2] = [&channel, &p.now];
    // Up to three statements in one round trip, run in order (between the planner setting
    // and its reset): the claim sees what staging made available. At the end, with nothing
    // to stage or read, there is nothing to ask.
    let idle_at_end = at_end && !stage_first && known_settings.is_some();
    let (_, staged, read_settings, rows, _) = if idle_at_end {
        ((), None, None, Vec::new(), ())
    } else {
        tokio::try_join!(
            c.batch_execute(ORDERED_WALK),
            async {
                match stage_first {
                    true => c.query_one(&stage, &stage_params).await.map(Some),
                    false => Ok(None),
                }
            },
            async {
                match known_settings {
                    None => c.query(&settings, &[]).await.map(Some),
                    Some(_) => Ok(None),
                }
            },
            async {
                match at_end {
                    true => Ok(Vec::new()),
                    false => c.query(&take, &params).await,
                }
            },
            c.batch_execute(ORDERED_WALK_END)
        )
        .map_err(db_err)?
    };
    let mut claimed = tasks_from_rows(&rows)?;
    // RETURNING has no order of its own.
    claimed.sort_by_key(|t| Key::of(t).order());
    let next_due = match &staged {
        Some(row) => Some(staged_next(row, p.now)?),
        None => None,
    };
    let read_settings = match read_settings {
        Some(rows) => Some(queue_settings(&rows)?),
        None => None,
    };
    let (mut locked, mut rated): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for (name, paused, limited) in read_settings.iter().chain(&known_settings).flatten() {
        if *paused || !(p.queues.is_empty() || p.queues.contains(name)) {
            continue;
        }
        match limited {
            Some(Limited::Lock) => locked.push(name.clone()),
            Some(Limited::Reserve) => rated.push(name.clone()),
            None => {}
        }
    }
    cursors.learnt(&start, next_due, read_settings, p.now);
    let mut staged_before_end = false;
    if let Some(row) = &staged {
        if let (Some(top), Some(first)) = (col(row, 0)?, col(row, 1)?) {
            cursors.move_back(Key::before(top, first));
            staged_before_end = at_end;
        }
    }
    if staged_before_end {
        return Ok(None);
    }
    // A short claim over every priority walked to the end of the open queues' claimable
    // tasks: the next ones start after the end, until an announcement or the probe moves them
    // back, instead of walking again past every task of a limited or paused queue.
    let exhausted = claimed.len() < p.max as usize && p.min_priority.is_none();
    cursors.finish(start, claimed.last().map(Key::of), exhausted);
    let left = p.max.saturating_sub(claimed.len() as u32);
    let mut held_until = None;
    if left > 0 && !(locked.is_empty() && rated.is_empty()) {
        let (reserved, held) = match rated.is_empty() {
            true => Default::default(),
            false => super::rated::reserve(c, &rated, left, p.now).await?,
        };
        held_until = held;
        if !(locked.is_empty() && reserved.is_empty()) {
            let (more, held) = super::limited::claim_limited(
                c,
                (pool, cursors),
                p,
                (&locked, &reserved),
                left,
                expires,
            )
            .await?;
            claimed.extend(more);
            claimed.sort_by_key(|t| Key::of(t).order());
            held_until = sked_store::rate::sooner(held_until, held);
        }
    }
    Ok(Some((claimed, held_until)))
}

/// When the next waiting task is due, from staging's row (not known when it staged a full batch:
/// more may be due).
fn staged_next(row: &tokio_postgres::Row, now: Timestamp) -> Result<NextDue> {
    let (n, next): (i64, Option<Timestamp>) = (col(row, 2)?, col(row, 3)?);
    Ok(match (n >= STAGE_BATCH, next) {
        (true, _) => NextDue::Unknown,
        (false, None) => NextDue::Never { checked: now },
        (false, Some(at)) => NextDue::At { at, checked: now },
    })
}

fn queue_settings(rows: &[tokio_postgres::Row]) -> Result<Vec<QueueSetting>> {
    rows.iter()
        .map(|row| {
            let limited = col::<Option<bool>>(row, 2)?.map(|rate_only| match rate_only {
                true => Limited::Reserve,
                false => Limited::Lock,
            });
            Ok((col(row, 0)?, col(row, 1)?, limited))
        })
        .collect()
}

/// Looks for the first claimable task from the front of the claim index, apart from the
/// claims (with a snapshot held it walks every task claimed since), and hands it to
/// [`ClaimCursors::probed`]. A failure only delays the next probe. `open`: among the queues
/// that are neither paused nor limited (the claim's); otherwise among `p`'s queues (a walk of
/// one limited queue).
pub(super) async fn probe(
    pool: Pool,
    cursors: Arc<ClaimCursors>,
    filter_key: String,
    seen: Option<Key>,
    p: TaskClaimParams,
    open: bool,
) {
    // Its cost is the walk: the time to get a connection does not count.
    let mut began = Instant::now();
    let first = async {
        let c = pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        began = Instant::now();
        let mut params: Vec<Param<'_>> = Vec::new();
        let filter = candidates_filter(&p.queues, &p.kinds, &None, &mut params);
        let open = match open {
            true => format!(" AND {}", OPEN.as_str()),
            false => String::new(),
        };
        let stmt = c
            .prepare_cached(&format!(
                "SELECT priority, run_at, id FROM sked_tasks c WHERE {filter}{open} \
                 ORDER BY priority DESC, run_at, id LIMIT 1"
            ))
            .await
            .map_err(db_err)?;
        let row = c.query_opt(&stmt, &params).await.map_err(db_err)?;
        row.map(|r| -> Result<Key> {
            Ok(Key {
                priority: col(&r, 0)?,
                run_at: col(&r, 1)?,
                id: col(&r, 2)?,
            })
        })
        .transpose()
    };
    let first = first.await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "the claim probe failed");
        None
    });
    cursors.probed(&filter_key, first, seen, p.now, began.elapsed());
}

/// The `WHERE` of a claim's candidate scan, with its parameters appended to `params`.
pub(super) fn candidates_filter<'a>(
    queues: &'a Vec<String>,
    kinds: &'a Vec<String>,
    min_priority: &'a Option<i32>,
    params: &mut Vec<Param<'a>>,
) -> String {
    let mut sql = String::from("state = 'available'");
    if !queues.is_empty() {
        params.push(queues);
        sql.push_str(&format!(" AND queue = ANY(${})", params.len()));
    }
    if !kinds.is_empty() {
        params.push(kinds);
        sql.push_str(&format!(" AND kind = ANY(${})", params.len()));
    }
    if let Some(min) = min_priority {
        params.push(min);
        sql.push_str(&format!(" AND priority >= ${}", params.len()));
    }
    sql
}

/// Extends a held attempt's lease (`$1` id, `$2` attempt) until `$3`, or its timeout and the
/// grace (`$4`, milliseconds) after its start when that comes first; a task with a timeout
/// whose lease would end by now (`$5`) is not extended, as [`rules::heartbeat`] says.
pub(crate) static HEARTBEAT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let lease = lease_end_sql("t.started_at", "$3", "$4");
    let running = super::by_key("state = 'running'");
    format!(
        "UPDATE sked_tasks t SET lease_expires_at = {lease} \
         WHERE id = $1 AND {running} AND attempt = $2 \
           AND (timeout_ms IS NULL OR {lease} > $5::timestamptz) \
         RETURNING cancel_requested, lease_expires_at"
    )
});

pub(crate) async fn heartbeat(c: &mut Object, p: &TaskHeartbeatParams) -> Result<HeartbeatReply> {
    let wanted = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let stmt = c.prepare_cached(&HEARTBEAT).await.map_err(db_err)?;
    let grace = grace_ms(p.timeout_grace);
    match c
        .query_opt(&stmt, &[&p.id, &p.attempt, &wanted, &grace, &p.now])
        .await
        .map_err(db_err)?
    {
        Some(row) => Ok(HeartbeatReply {
            cancel_requested: col(&row, 0)?,
            lease_expires_at: col(&row, 1)?,
        }),
        None => Err(not_extended(c, p).await),
    }
}

/// Why a heartbeat extended nothing, by the rules on the task as it is now: gone, held by
/// another attempt, or past its timeout.
async fn not_extended(c: &Object, p: &TaskHeartbeatParams) -> StoreError {
    let read = async {
        let row = c
            .query_opt(
                &format!("SELECT {TASK_COLUMNS} FROM sked_tasks t WHERE t.id = $1"),
                &[&p.id],
            )
            .await
            .map_err(db_err)?;
        let task = row.map(|r| crate::codec::task_from_row(&r)).transpose()?;
        rules::heartbeat(
            task.as_ref(),
            p.id,
            p.attempt,
            p.now,
            p.lease_ttl,
            p.timeout_grace,
        )
    };
    match read.await {
        Err(e) => e,
        // Changed between the two statements: no longer held as it was.
        Ok(_) => StoreError::StaleLease {
            id: p.id,
            attempt: p.attempt,
        },
    }
}
