//! Claiming tasks: due waiting tasks are staged, then the first available tasks in claim order
//! (priority, then run time, then id) across the asked queues are leased to a worker.

use std::cmp::Reverse;
use std::collections::HashMap;

use jiff::Timestamp;
use rusqlite::{Transaction, params, params_from_iter, types::Value};
use sked_core::{RateLimit, TaskId};
use sked_store::keyed::{KeyLimits, LIMITED_OR_PAUSED};
use sked_store::rate;
use sked_store::*;

use super::kept_stages;
use super::multi_row::{Leased, lease_claimed};
use crate::codec::{db_err, from_ts, ts};
use crate::partial_indexes;

mod keyed;

pub(crate) use keyed::key_holder;

/// Moves due scheduled/retrying tasks to available.
fn stage(tx: &Transaction<'_>, now: Timestamp) -> Result<usize> {
    tx.prepare_cached(&partial_indexes::STAGE)
        .map_err(db_err)?
        .execute([ts(now)])
        .map_err(db_err)
}

/// What claims may take of the paused and limited queues.
#[derive(Default)]
struct Limits {
    /// Queues claims leave alone: paused, at their concurrency limit, or at their rate limit.
    excluded: Vec<String>,
    /// How many more tasks a limited queue may start.
    quota: HashMap<String, i64>,
    /// The rate-limited queues, with their bucket (see [`RateLimit::room`]): their starts are
    /// logged.
    rated: HashMap<String, (RateLimit, Option<Timestamp>)>,
    /// When the first queue at its rate limit lets a task start again.
    held_until: Option<Timestamp>,
    /// The queues with per-key limits, with them: their claims take keys in turn.
    keyed: HashMap<String, KeyLimits>,
}

impl Limits {
    fn read(tx: &Transaction<'_>, now: Timestamp) -> Result<Limits> {
        let mut limits = Limits::default();
        let mut stmt = tx
            .prepare_cached(
                "SELECT q.name, q.paused, q.concurrency_limit, \
                 (SELECT count(*) FROM tasks t WHERE t.state = 'running' AND t.queue = q.name), \
                 q.rate_limit, q.rate_period_ms, q.rate_burst, q.rate_bucket_at, q.per_key_limit, \
                 q.per_key_rate_limit, q.per_key_rate_period_ms, q.key_order \
                 FROM queues q WHERE q.paused = 1 OR q.concurrency_limit IS NOT NULL \
                   OR q.rate_limit IS NOT NULL OR q.per_key_limit IS NOT NULL \
                   OR q.per_key_rate_limit IS NOT NULL",
            )
            .map_err(db_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, bool>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, i64>(3)?,
                    rate::from_columns(rate::Columns {
                        limit: r.get(4)?,
                        period_ms: r.get(5)?,
                        burst: r.get(6)?,
                    }),
                    r.get::<_, Option<i64>>(7)?.map(from_ts),
                    KeyLimits {
                        running: r.get::<_, Option<u32>>(8)?,
                        rate: rate::from_columns(rate::Columns {
                            limit: r.get(9)?,
                            period_ms: r.get(10)?,
                            burst: None,
                        }),
                        strict: r.get::<_, Option<String>>(11)?.as_deref() == Some("strict"),
                    },
                ))
            })
            .map_err(db_err)?;
        for row in rows {
            let (name, paused, limit, running, rate, bucket, per_key) = row.map_err(db_err)?;
            if paused {
                limits.excluded.push(name);
                continue;
            }
            let mut room = None;
            if let Some(rate) = rate {
                let r = rate.room(&starts(tx, &name, &rate, now)?, bucket, now);
                limits.held_until = rate::sooner(limits.held_until, r.frees_at);
                limits.rated.insert(name.clone(), (rate, bucket));
                room = Some(r);
            }
            if per_key.any() {
                limits.keyed.insert(name.clone(), per_key);
            }
            match rate::quota(limit.map(|l| l - running), room) {
                Some(left) if left <= 0 => limits.excluded.push(name),
                Some(left) => {
                    limits.quota.insert(name, left);
                }
                None if per_key.any() => {
                    limits.quota.insert(name, i64::MAX);
                }
                None => {}
            }
        }
        Ok(limits)
    }

    /// Logs the starts of a claim in rate-limited queues (`started`: how many tasks of each it
    /// leased), takes them from a burst's bucket, and forgets those out of every window.
    fn log_starts(
        &self,
        tx: &Transaction<'_>,
        started: &HashMap<&str, i64>,
        now: Timestamp,
    ) -> Result<()> {
        for (queue, (rate, bucket)) in &self.rated {
            let n = started.get(queue.as_str()).copied().unwrap_or(0);
            if let (true, Some(after)) = (n > 0, rate.bucket_after(*bucket, n as u32, now)) {
                tx.prepare_cached("UPDATE queues SET rate_bucket_at = ?2 WHERE name = ?1")
                    .map_err(db_err)?
                    .execute(params![queue, ts(after)])
                    .map_err(db_err)?;
            }
            if n > 0 {
                tx.prepare_cached(
                    "INSERT INTO queue_starts (queue, started_at, n) VALUES (?1, ?2, ?3)",
                )
                .map_err(db_err)?
                .execute(params![queue, ts(now), n])
                .map_err(db_err)?;
            }
            tx.prepare_cached("DELETE FROM queue_starts WHERE queue = ?1 AND started_at <= ?2")
                .map_err(db_err)?
                .execute(params![queue, ts(rate.window_start(now))])
                .map_err(db_err)?;
        }
        Ok(())
    }
}

/// The starts of `queue` logged in the window of `rate` that ends at `now`.
pub(crate) fn starts(
    tx: &rusqlite::Connection,
    queue: &str,
    rate: &RateLimit,
    now: Timestamp,
) -> Result<Vec<(Timestamp, u32)>> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT started_at, n FROM queue_starts WHERE queue = ?1 AND started_at > ?2",
        )
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params![queue, ts(rate.window_start(now))], |r| {
            Ok((from_ts(r.get(0)?), r.get::<_, u32>(1)?))
        })
        .map_err(db_err)?;
    rows.map(|r| r.map_err(db_err)).collect()
}

/// Leases the first available tasks for `p`, in claim order (a large claim's are read once
/// this transaction is committed: [`Leased`]); also says when a rate limit that held tasks
/// back lets one start again.
///
/// Tasks past their deadline end `expired` first, in the same transaction: the claim's walks
/// read the claim indexes alone and need not look at each task's deadline. A claim finds
/// none in one probe of the index of tasks that can expire.
pub(crate) fn claim(
    tx: &Transaction<'_>,
    p: &TaskClaimParams,
) -> Result<(Leased, Option<Timestamp>)> {
    super::expire_all(tx, p.now)?;
    stage(tx, p.now)?;
    if p.max == 0 {
        return Ok((Leased::Read(Vec::new()), None));
    }
    let limits = Limits::read(tx, p.now)?;
    let mut held_until = limits.held_until;
    let Chosen {
        ids,
        started,
        taken,
    } = keys(tx, p, &limits, &mut held_until)?;
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let lease = kept_stages::Lease {
        worker: &p.worker,
        now: p.now,
        expires,
    };
    let mut inserted = 0;
    for (part, n) in taken {
        kept_stages::take(tx, part, n, &lease)?;
        inserted += n;
    }
    let leased = lease_claimed(
        tx,
        ids,
        inserted,
        &p.worker,
        p.now,
        expires,
        p.timeout_grace,
    )?;
    limits.log_starts(tx, &started, p.now)?;
    Ok((leased, held_until))
}

/// Whether claims take tasks of `queue` as they come: it is neither paused nor limited.
pub(crate) fn queue_is_open(tx: &Transaction<'_>, queue: &str) -> Result<bool> {
    tx.prepare_cached(&format!(
        "SELECT NOT EXISTS (SELECT 1 FROM queues q WHERE q.name = ?1 AND {LIMITED_OR_PAUSED})"
    ))
    .map_err(db_err)?
    .query_row([queue], |r| r.get(0))
    .map_err(db_err)
}

/// Conditions added to a claim's statement, with their values, parameters numbered from
/// `first` on.
struct Conditions {
    sql: String,
    values: Vec<Value>,
    first: usize,
}

impl Conditions {
    fn new(first: usize) -> Conditions {
        Conditions {
            sql: String::new(),
            values: Vec::new(),
            first,
        }
    }

    fn next(&self) -> usize {
        self.first + self.values.len()
    }

    /// ` AND {test} (?a, ?b, …)` (`test` as `kind IN`), unless `items` is empty.
    fn list(mut self, test: &str, items: &[String]) -> Conditions {
        if !items.is_empty() {
            self.sql.push_str(&format!(" AND {test} ("));
            for (i, item) in items.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                self.sql.push_str(&format!("{sep}?{}", self.next()));
                self.values.push(Value::Text(item.clone()));
            }
            self.sql.push(')');
        }
        self
    }

    /// The claim's filters on kinds and priority.
    fn claim_filters(self, p: &TaskClaimParams) -> Conditions {
        let mut c = self.list("kind IN", &p.kinds);
        if let Some(min) = p.min_priority {
            c.sql.push_str(&format!(" AND priority >= ?{}", c.next()));
            c.values.push(Value::Integer(i64::from(min)));
        }
        c
    }
}

/// A claim's key: priority (highest first), run time, id.
type Key = (Reverse<i64>, i64, TaskId);

/// Where a claim found a key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    /// The walk of one queue's index: the queue's place among the walked queues.
    Walk(usize),
    /// The walk of the open queues together.
    Together,
    /// A released part of a kept stage ([`kept_stages`]), by its id.
    Part(i64),
}

/// A key, and where it was found.
type Walked = (Key, Source);

/// At most this many queues that are neither paused nor limited are walked each on its own
/// index, instead of together on one, by a claim over every queue while other queues are left
/// out (see [`keys`]).
const OPEN_WALKS: usize = 4;

/// The ids of the first `p.max` available tasks a claim may take, in claim order. A claim over
/// every queue walks one index for the queues that are neither paused nor limited; each
/// limited queue with room, and each named queue, is walked on its own index for at most what
/// its quota leaves, so that a limited queue's backlog never crowds others out of a claim.
///
/// The walk of one index for the open queues passes over every available task of the queues
/// it leaves out: with a limited queue's backlog of 100,000 that was most of a claim's time.
/// So while queues are left out, the open queues that have available tasks are found first
/// (one probe per queue with available tasks), and when they are few, each is walked on its
/// own index too.
///
/// The released parts of kept stages are read with the rows: a part's next tasks follow one
/// another in claim order, and the parts come in claim order, so their first `p.max` tasks
/// merge with the rows' keys.
fn keys<'q>(
    tx: &Transaction<'_>,
    p: &TaskClaimParams,
    limits: &'q Limits,
    held_until: &mut Option<Timestamp>,
) -> Result<Chosen<'q>> {
    let mut keys: Vec<Walked> = Vec::new();
    let mut queues: Vec<String> = if p.queues.is_empty() {
        let mut left_out = limits.excluded.clone();
        left_out.extend(limits.quota.keys().cloned());
        let mut queues: Vec<String> = limits.quota.keys().cloned().collect();
        let open = match left_out.is_empty() {
            true => None,
            false => Some(open_with_tasks(tx, &left_out)?),
        };
        match open {
            Some(open) if open.len() <= OPEN_WALKS => queues.extend(open),
            _ => {
                keys = keys_of_open(tx, p, &left_out)?
                    .into_iter()
                    .map(|k| (k, Source::Together))
                    .collect()
            }
        }
        queues
    } else {
        p.queues
            .iter()
            .filter(|q| !limits.excluded.contains(q))
            .cloned()
            .collect()
    };
    queues.sort_unstable();
    queues.dedup();
    let parts = part_keys(tx, p, limits)?;
    let merge = !queues.is_empty() || !parts.is_empty();
    keys.extend(parts);
    if !queues.is_empty() {
        let c = Conditions::new(3).claim_filters(p);
        let mut stmt = tx
            .prepare_cached(&partial_indexes::claim_keys(&c.sql))
            .map_err(db_err)?;
        let max = i64::from(p.max);
        for (walk, queue) in queues.iter().enumerate() {
            let limit = limits.quota.get(queue).map_or(max, |&left| left.min(max));
            if let Some(&per_key) = limits.keyed.get(queue) {
                let (found, frees) = keyed::claim_keys(tx, queue, per_key, limit, p)?;
                *held_until = rate::sooner(*held_until, frees);
                keys.extend(found.into_iter().map(|k| (k, Source::Walk(walk))));
                continue;
            }
            let args = [Value::Text(queue.clone()), Value::Integer(limit)]
                .into_iter()
                .chain(c.values.iter().cloned());
            let rows = stmt
                .query_map(params_from_iter(args), |r| {
                    Ok((Reverse(r.get(0)?), r.get(1)?, r.get(2)?))
                })
                .map_err(db_err)?;
            for row in rows {
                keys.push((row.map_err(db_err)?, Source::Walk(walk)));
            }
        }
    }
    if merge {
        keys.sort_unstable();
        keys.truncate(p.max as usize);
    }
    let mut started: HashMap<&str, i64> = HashMap::new();
    let mut taken: Vec<(i64, usize)> = Vec::new();
    for (_, source) in &keys {
        match *source {
            Source::Walk(walk) => {
                let rated = queues
                    .get(walk)
                    .and_then(|q| limits.rated.get_key_value(q.as_str()));
                if let Some((queue, _)) = rated {
                    *started.entry(queue.as_str()).or_default() += 1;
                }
            }
            Source::Together => {}
            Source::Part(part) => match taken.iter_mut().find(|(id, _)| *id == part) {
                Some((_, n)) => *n += 1,
                None => taken.push((part, 1)),
            },
        }
    }
    Ok(Chosen {
        ids: keys.into_iter().map(|((_, _, id), _)| id).collect(),
        started,
        taken,
    })
}

/// The tasks a claim chose ([`keys`]).
struct Chosen<'q> {
    /// Their ids, in claim order.
    ids: Vec<TaskId>,
    /// How many of them each rate-limited queue starts (such a queue is limited, so it is
    /// walked on its own).
    started: HashMap<&'q str, i64>,
    /// How many each released part gives, from its next task on, by the part's id.
    taken: Vec<(i64, usize)>,
}

/// The first `p.max` tasks of the released parts a claim for `p` may take, in claim order:
/// parts of the queues it may take as they come, of its kinds and priorities. A limited queue
/// has no released part (its release and its limit make rows), and is left out here too.
fn part_keys(tx: &Transaction<'_>, p: &TaskClaimParams, limits: &Limits) -> Result<Vec<Walked>> {
    let mut keys: Vec<Walked> = Vec::new();
    for part in kept_stages::released(tx)? {
        let left = p.max as usize - keys.len();
        if left == 0 {
            break;
        }
        let fits = !limits.excluded.contains(&part.queue)
            && !limits.quota.contains_key(&part.queue)
            && (p.queues.is_empty() || p.queues.contains(&part.queue))
            && (p.kinds.is_empty() || p.kinds.contains(&part.kind))
            && p.min_priority.is_none_or(|min| part.priority >= min);
        if !fits {
            continue;
        }
        let n = (part.left.max(0) as usize).min(left);
        let key = |k: usize| {
            (
                Reverse(i64::from(part.priority)),
                part.run_at,
                part.next + k as i64,
            )
        };
        keys.extend((0..n).map(|k| (key(k), Source::Part(part.id))));
    }
    Ok(keys)
}

/// The queues with available tasks, but the `left_out` ones.
fn open_with_tasks(tx: &Transaction<'_>, left_out: &[String]) -> Result<Vec<String>> {
    let mut stmt = tx
        .prepare_cached(&partial_indexes::AVAILABLE_QUEUES)
        .map_err(db_err)?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(db_err)?;
    let mut open = Vec::new();
    for queue in rows {
        let queue = queue.map_err(db_err)?;
        if !left_out.contains(&queue) {
            open.push(queue);
        }
    }
    Ok(open)
}

/// The first available tasks of every queue but the `left_out` ones, walking one index in
/// claim order.
fn keys_of_open(
    tx: &Transaction<'_>,
    p: &TaskClaimParams,
    left_out: &[String],
) -> Result<Vec<Key>> {
    let c = Conditions::new(2)
        .list("queue NOT IN", left_out)
        .claim_filters(p);
    let values = std::iter::once(Value::Integer(i64::from(p.max))).chain(c.values);
    let mut stmt = tx
        .prepare_cached(&partial_indexes::claim_keys_all(&c.sql))
        .map_err(db_err)?;
    let rows = stmt
        .query_map(params_from_iter(values), |r| {
            Ok((Reverse(r.get(0)?), r.get(1)?, r.get(2)?))
        })
        .map_err(db_err)?;
    rows.map(|r| r.map_err(db_err)).collect()
}
