//! Claiming from paused-or-limited queues' neighbours: the limited queues (a concurrency or
//! rate limit), each read on its own under its queue row's lock.

use std::collections::HashMap;

use deadpool_postgres::Object;
use jiff::Timestamp;
use sked_core::{Task, TaskId};
use sked_store::keyed::{KeyLimits, LIMITED};
use sked_store::*;

use super::Param;
use super::claim::{candidates_filter, grace_ms, lease_end_sql};
use super::cursor::{ClaimCursors, Key};
use crate::codec::{TASK_COLUMNS, col, db_err, tasks_from_rows};

/// With concurrency or rate limits in play, the limited queues' rows are locked for the
/// transaction, so that nodes claiming at once cannot together exceed a limit. Also says when
/// a rate limit that held tasks back lets one start again.
pub(super) async fn claim_limited(
    c: &mut Object,
    cursors: &ClaimCursors,
    p: &TaskClaimParams,
    limited: &Vec<String>,
    max: u32,
    expires: Timestamp,
) -> Result<(Vec<Task>, Option<Timestamp>)> {
    let tx = c.transaction().await.map_err(db_err)?;
    // The limited queues' rows are locked first; then, in a statement of its own, each one's
    // running tasks and the starts its rate window counts are read. In one statement the
    // counts would come from the snapshot taken before the lock was granted, without what the
    // claim that held it had just committed, and nodes claiming at once would each take a
    // full window. Sent together, the second statement still runs after the first.
    let lock = tx
        .prepare_cached(&format!(
            "SELECT q.name FROM sked_queues q WHERE q.name = ANY($1) AND NOT q.paused \
               AND {LIMITED} ORDER BY q.name FOR UPDATE"
        ))
        .await
        .map_err(db_err)?;
    let read = tx
        .prepare_cached(&format!(
            "SELECT q.name, q.concurrency_limit, \
               (SELECT count(*) FROM sked_tasks t WHERE t.state = 'running' AND t.queue = q.name), \
               q.rate_limit, q.rate_period_ms, \
               coalesce(w.at, '{{}}'), coalesce(w.n, '{{}}'), \
               q.rate_burst, q.rate_bucket_at, q.per_key_limit, q.key_cursor, \
               q.per_key_rate_limit, q.per_key_rate_period_ms \
             FROM sked_queues q \
             LEFT JOIN LATERAL ( \
               SELECT array_agg(s.started_at) AS at, array_agg(s.n) AS n \
               FROM sked_queue_starts s WHERE s.queue = q.name \
                 AND s.started_at > $2::timestamptz - q.rate_period_ms * interval '1 millisecond' \
             ) w ON true \
             WHERE q.name = ANY($1) AND NOT q.paused AND {LIMITED}"
        ))
        .await
        .map_err(db_err)?;
    let (lock_params, read_params): ([Param<'_>; 1], [Param<'_>; 2]) =
        ([limited], [limited, &p.now]);
    let (_, limits) =
        tokio::try_join!(tx.query(&lock, &lock_params), tx.query(&read, &read_params))
            .map_err(db_err)?;
    let mut quota: HashMap<String, i64> = HashMap::new();
    let mut rated: HashMap<String, (sked_core::RateLimit, Option<Timestamp>)> = HashMap::new();
    let mut held_until: Option<Timestamp> = None;
    let mut keyed_queues: HashMap<String, (KeyLimits, Option<String>)> = HashMap::new();
    for row in &limits {
        let name: String = col(row, 0)?;
        let per_key = KeyLimits {
            running: col::<Option<i32>>(row, 9)?.map(|n| n.max(0) as u32),
            rate: sked_store::rate::from_columns(sked_store::rate::Columns {
                limit: col(row, 11)?,
                period_ms: col(row, 12)?,
                burst: None,
            }),
        };
        if per_key.any() {
            keyed_queues.insert(name.clone(), (per_key, col(row, 10)?));
        }
        let running: i64 = col(row, 2)?;
        let left = col::<Option<i32>>(row, 1)?.map(|l| i64::from(l) - running);
        let mut room = None;
        let rate = sked_store::rate::from_columns(sked_store::rate::Columns {
            limit: col(row, 3)?,
            period_ms: col(row, 4)?,
            burst: col(row, 7)?,
        });
        if let Some(rate) = rate {
            let at: Vec<Timestamp> = col(row, 5)?;
            let n: Vec<i32> = col(row, 6)?;
            let starts: Vec<(Timestamp, u32)> = at
                .into_iter()
                .zip(n.into_iter().map(|n| n.max(0) as u32))
                .collect();
            let bucket: Option<Timestamp> = col(row, 8)?;
            let r = rate.room(&starts, bucket, p.now);
            held_until = sked_store::rate::sooner(held_until, r.frees_at);
            rated.insert(name.clone(), (rate, bucket));
            room = Some(r);
        }
        let left = sked_store::rate::quota(left, room).unwrap_or(i64::MAX);
        quota.insert(name, left);
    }
    // Each queue with room on its own, for at most what its quota leaves: a queue at its
    // limit never crowds the others out.
    let mut candidates: Vec<(Key, String)> = Vec::new();
    let mut walks = Vec::new();
    for (queue, left) in quota.iter().filter(|(_, left)| **left > 0) {
        let take = (*left).min(i64::from(max));
        if let Some((per_key, cursor)) = keyed_queues.get(queue) {
            let (found, frees) =
                super::keyed::candidates(&tx, queue, *per_key, cursor, take, p).await?;
            held_until = sked_store::rate::sooner(held_until, frees);
            candidates.extend(found.into_iter().map(|key| (key, queue.clone())));
            continue;
        }
        let walk = Walk::new(cursors, queue, p);
        let found = walk.candidates(&tx, take, p).await?;
        walks.push((walk, found.len() < take as usize));
        candidates.extend(found.into_iter().map(|key| (key, queue.clone())));
    }
    candidates.sort_by_key(|(key, _)| key.order());
    let passed_over = candidates.len() > max as usize;
    candidates.truncate(max as usize);
    for (walk, short) in walks {
        let last = candidates
            .iter()
            .filter(|(_, q)| *q == walk.queue)
            .map(|(key, _)| *key)
            .next_back();
        // Short and all taken: the walk reached the end of the queue's claimable tasks.
        let exhausted = short && !passed_over && p.min_priority.is_none();
        walk.finish(cursors, last, exhausted);
    }
    let chosen: Vec<TaskId> = candidates.iter().map(|(key, _)| key.id).collect();
    let mut started: HashMap<&str, i32> = HashMap::new();
    for (_, queue) in &candidates {
        *started.entry(queue.as_str()).or_default() += 1;
    }
    let lease = lease_end_sql("$2", "$3", "$5");
    let rows = tx
        .query(
            &format!(
                "UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, started_at = $2, \
                   lease_expires_at = {lease}, worker = $4, cancel_requested = false \
                 WHERE t.id = ANY($1) AND t.state = 'available' RETURNING {TASK_COLUMNS}"
            ),
            &[&chosen, &p.now, &expires, &p.worker, &grace_ms(p.timeout_grace)],
        )
        .await
        .map_err(db_err)?;
    if !rated.is_empty() {
        // The starts a window counts, one row per queue and claim, and what they took from a
        // burst's bucket; and those out of every window are forgotten.
        let queues: Vec<&str> = rated.keys().map(String::as_str).collect();
        let counts: Vec<i32> = queues
            .iter()
            .map(|q| started.get(q).copied().unwrap_or(0))
            .collect();
        let buckets: Vec<Option<Timestamp>> = queues
            .iter()
            .zip(&counts)
            .map(|(q, n)| {
                let (rate, bucket) = rated[*q];
                match n {
                    0 => bucket,
                    n => rate.bucket_after(bucket, *n as u32, p.now),
                }
            })
            .collect();
        tx.execute(
            "WITH logged AS ( \
               INSERT INTO sked_queue_starts (queue, started_at, n) \
               SELECT q, $3, n FROM unnest($1::text[], $2::int[]) AS l(q, n) WHERE n > 0), \
             bucket AS ( \
               UPDATE sked_queues k SET rate_bucket_at = b.at \
               FROM unnest($1::text[], $2::int[], $4::timestamptz[]) AS b(q, n, at) \
               WHERE k.name = b.q AND b.n > 0 AND k.rate_burst IS NOT NULL) \
             DELETE FROM sked_queue_starts s USING sked_queues q \
             WHERE s.queue = ANY($1) AND q.name = s.queue \
               AND (q.rate_limit IS NULL \
                 OR s.started_at <= $3::timestamptz - q.rate_period_ms * interval '1 millisecond')",
            &[&queues, &counts, &p.now, &buckets],
        )
        .await
        .map_err(db_err)?;
    }
    tx.commit().await.map_err(db_err)?;
    Ok((tasks_from_rows(&rows)?, held_until))
}

/// A walk of one limited queue's claimable tasks, in claim order, from where the last one
/// ended (see [`ClaimCursors`]): without it each claim would walk again, from the front of the
/// claim index, the entries of every task claimed since the last vacuum.
struct Walk {
    queue: String,
    filter: String,
    start: super::cursor::Start,
}

impl Walk {
    fn new(cursors: &ClaimCursors, queue: &str, p: &TaskClaimParams) -> Walk {
        let filter = format!("limited {queue:?} {:?}", p.kinds);
        Walk {
            queue: queue.to_owned(),
            start: cursors.start_walk(&filter, p.now),
            filter,
        }
    }

    /// The first `take` claimable tasks of the queue after the walk's position, locked.
    async fn candidates(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        take: i64,
        p: &TaskClaimParams,
    ) -> Result<Vec<Key>> {
        let one = vec![self.queue.clone()];
        let mut keys = Vec::new();
        // The rest of the position's priority, then the lower ones; from the front without one.
        let steps: &[Option<bool>] = match self.start.after {
            Some(_) => &[Some(true), Some(false)],
            None => &[None],
        };
        for step in steps {
            let want = take - keys.len() as i64;
            if want <= 0 {
                break;
            }
            let mut params: Vec<Param<'_>> = vec![&want];
            let after = self.start.after.as_ref();
            let position = match (step, after) {
                (Some(true), Some(key)) => {
                    params.extend([&key.priority as Param<'_>, &key.run_at, &key.id]);
                    " AND priority = $2 AND (run_at, id) > ($3, $4)"
                }
                (Some(false), Some(key)) => {
                    params.push(&key.priority);
                    " AND priority < $2"
                }
                _ => "",
            };
            let filter = candidates_filter(&one, &p.kinds, &p.min_priority, &mut params);
            let rows = tx
                .query(
                    &format!(
                        "SELECT priority, run_at, id FROM sked_tasks WHERE {filter}{position} \
                         ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED"
                    ),
                    &params,
                )
                .await
                .map_err(db_err)?;
            for row in &rows {
                keys.push(Key {
                    priority: col(row, 0)?,
                    run_at: col(row, 1)?,
                    id: col(row, 2)?,
                });
            }
        }
        Ok(keys)
    }

    /// Records where the walk ended: `last`, the last task taken; `exhausted` when it reached
    /// the end. A walk from a position that found nothing starts from the front next time,
    /// so that a task the position passed without an announcement is not left behind.
    fn finish(self, cursors: &ClaimCursors, last: Option<Key>, exhausted: bool) {
        match (last, self.start.after) {
            (None, Some(_)) => cursors.restart(&self.filter),
            _ => cursors.finish(self.start, last, exhausted),
        }
    }
}
