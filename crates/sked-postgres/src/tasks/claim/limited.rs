//! Claiming from limited queues (a concurrency, rate or per-key limit), each read on its own:
//! under its queue row's lock, or, for a queue limited by a rate alone, within the starts
//! reserved for the claim beforehand ([`super::rated`]).

use std::collections::HashMap;

use deadpool_postgres::{Object, Transaction};
use jiff::Timestamp;
use sked_core::{Task, TaskId};
use sked_store::keyed::{KeyLimits, LIMITED};
use sked_store::*;

use super::Claims;
use super::positions::{ClaimPositions, Key};
use super::rated::{Reservation, lock_and_read, window_starts};
use super::sql::{Candidates, candidates_filter, claim_sql, grace_ms, lease_end_sql};
use crate::codec::{TASK_COLUMNS, col, db_err, tasks_from_rows};
use crate::tasks::Param;

/// Claims at most `max` tasks from the `limited` queues, whose rows are locked for the
/// transaction so that nodes claiming at once cannot together exceed a limit, and from the
/// queues with starts `reserved`, within them. Also says when a rate limit that held tasks
/// back lets one start again.
pub(super) async fn claim_limited(
    c: &mut Object,
    claims: Claims<'_>,
    p: &TaskClaimParams,
    limited: &[String],
    reserved: &HashMap<String, Reservation>,
    max: u32,
    expires: Timestamp,
) -> Result<(Vec<Task>, Option<Timestamp>)> {
    let tx = c.transaction().await.map_err(db_err)?;
    let limits = match limited.is_empty() {
        true => Vec::new(),
        false => read_locked(&tx, limited, p.now).await?,
    };
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
            strict: col::<Option<String>>(row, 13)?.as_deref() == Some("strict"),
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
            let bucket: Option<Timestamp> = col(row, 8)?;
            let r = rate.room(&window_starts(row, 5)?, bucket, p.now);
            held_until = sked_store::rate::sooner(held_until, r.frees_at);
            rated.insert(name.clone(), (rate, bucket));
            room = Some(r);
        }
        let left = sked_store::rate::quota(left, room).unwrap_or(i64::MAX);
        quota.insert(name, left);
    }
    for (queue, r) in reserved {
        quota.insert(queue.clone(), r.take);
    }
    let open: Vec<(&String, i64)> = quota
        .iter()
        .filter(|(_, left)| **left > 0)
        .map(|(queue, left)| (queue, (*left).min(i64::from(max))))
        .collect();
    let mut claimed = match open.as_slice() {
        // One queue without keys: found and claimed by one statement, as claims of the open
        // queues are.
        [(queue, take)] if !keyed_queues.contains_key(*queue) => {
            let walk = Walk::new(claims, queue, p);
            let claimed = walk.claim(&tx, *take, expires, p).await?;
            let exhausted = (claimed.len() as i64) < *take && p.min_priority.is_none();
            walk.finish(claims.positions, claimed.last().map(Key::of), exhausted);
            claimed
        }
        _ => {
            let taken = take(&tx, claims, p, &open, &keyed_queues, max).await?;
            held_until = sked_store::rate::sooner(held_until, taken.1);
            let lease = lease_end_sql("t.timeout_ms", "$2", "$3", "$5");
            let rows = tx
                .query(
                    &format!(
                        "UPDATE sked_tasks t SET state = 'running', attempt = t.attempt + 1, \
                           started_at = $2, lease_expires_at = {lease}, worker = $4, \
                           cancel_requested = false \
                         WHERE t.id = ANY($1) AND {} RETURNING {TASK_COLUMNS}",
                        crate::tasks::by_key("t.state = 'available'")
                    ),
                    &[
                        &taken.0,
                        &p.now,
                        &expires,
                        &p.worker,
                        &grace_ms(p.timeout_grace),
                    ],
                )
                .await
                .map_err(db_err)?;
            tasks_from_rows(&rows)?
        }
    };
    claimed.sort_by_key(|t| Key::of(t).order());
    let mut started: HashMap<&str, i32> = HashMap::new();
    for task in &claimed {
        *started.entry(task.queue.as_str()).or_default() += 1;
    }
    super::rated::give_back(&tx, reserved, &started).await?;
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
    Ok((claimed, held_until))
}

/// The tasks to claim from the `open` queues (with how many each may start), at most `max`
/// in all, in claim order; also when a key held by its rate frees. Each queue is read on its
/// own, for at most its share: a queue at its limit never crowds the others out.
async fn take(
    tx: &Transaction<'_>,
    claims: Claims<'_>,
    p: &TaskClaimParams,
    open: &[(&String, i64)],
    keyed_queues: &HashMap<String, (KeyLimits, Option<String>)>,
    max: u32,
) -> Result<(Vec<TaskId>, Option<Timestamp>)> {
    let mut held_until = None;
    let mut candidates: Vec<(Key, &str)> = Vec::new();
    let mut walks = Vec::new();
    for (queue, take) in open {
        if let Some((per_key, cursor)) = keyed_queues.get(*queue) {
            let (found, frees) =
                super::keyed::candidates(tx, queue, *per_key, cursor, *take, p).await?;
            held_until = sked_store::rate::sooner(held_until, frees);
            candidates.extend(found.into_iter().map(|key| (key, queue.as_str())));
            continue;
        }
        let walk = Walk::new(claims, queue, p);
        let found = walk.candidates(tx, *take, p).await?;
        walks.push((walk, found.len() < *take as usize));
        candidates.extend(found.into_iter().map(|key| (key, queue.as_str())));
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
        walk.finish(claims.positions, last, exhausted);
    }
    let chosen = candidates.iter().map(|(key, _)| key.id).collect();
    Ok((chosen, held_until))
}

/// Locks the `limited` queues' rows and reads their limits and what counts against them.
async fn read_locked(
    tx: &Transaction<'_>,
    limited: &[String],
    now: Timestamp,
) -> Result<Vec<tokio_postgres::Row>> {
    let columns = "q.name, q.concurrency_limit, \
        (SELECT count(*) FROM sked_tasks t WHERE t.state = 'running' AND t.queue = q.name), \
        q.rate_limit, q.rate_period_ms, coalesce(w.at, '{}'), coalesce(w.n, '{}'), \
        q.rate_burst, q.rate_bucket_at, q.per_key_limit, q.key_cursor, \
        q.per_key_rate_limit, q.per_key_rate_period_ms, q.key_order";
    lock_and_read(tx, limited, LIMITED, columns, now).await
}

/// A walk of one limited queue's claimable tasks, in claim order, from where the last one
/// ended, with a probe from the front beside it, as claims of the other queues go (see
/// [`ClaimPositions`]): without it each claim would walk again, from the front of the claim
/// index, the entries of every task claimed since the last vacuum.
struct Walk {
    queue: String,
    start: super::positions::Start,
}

impl Walk {
    /// A walk of `queue` for the claim `p`; a probe from the front beside it when one is due.
    fn new(claims: Claims<'_>, queue: &str, p: &TaskClaimParams) -> Walk {
        let filter = format!("limited {queue:?} {:?}", p.kinds);
        let start = claims.positions.start(&filter, p.now);
        if start.probe {
            let one = TaskClaimParams {
                queues: vec![queue.to_owned()],
                ..p.clone()
            };
            let probe = super::probe::probe(
                claims.pool.clone(),
                claims.positions.clone(),
                filter,
                start.after,
                one,
                false,
            );
            tokio::spawn(probe);
        }
        Walk {
            queue: queue.to_owned(),
            start,
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
            let filter = candidates_filter(&p.now, &one, &p.kinds, &p.min_priority, &mut params);
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

    /// Claims the first `take` claimable tasks of the queue after the walk's position.
    async fn claim(
        &self,
        tx: &Transaction<'_>,
        take: i64,
        expires: Timestamp,
        p: &TaskClaimParams,
    ) -> Result<Vec<Task>> {
        let grace = grace_ms(p.timeout_grace);
        let mut params: Vec<Param<'_>> = vec![&p.now, &expires, &p.worker, &take, &grace];
        if let Some(key) = &self.start.after {
            params.extend([&key.priority as Param<'_>, &key.run_at, &key.id]);
        }
        let one = vec![self.queue.clone()];
        let candidates = Candidates::of(&p.now, &one, &p.kinds, &p.min_priority, None, &mut params);
        let sql = claim_sql(&candidates, self.start.after.is_some(), false, false);
        let stmt = tx.prepare_cached(&sql).await.map_err(db_err)?;
        let rows = tx.query(&stmt, &params).await.map_err(db_err)?;
        tasks_from_rows(&rows)
    }

    /// Records where the walk ended: `last`, the last task taken; `exhausted` when it reached
    /// the end.
    fn finish(self, positions: &ClaimPositions, last: Option<Key>, exhausted: bool) {
        positions.finish(self.start, last, exhausted);
    }
}
