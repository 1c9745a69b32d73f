//! Claiming tasks (staging due ones first) and extending leases.

use std::sync::Arc;

use deadpool_postgres::{Object, Pool};
use jiff::Timestamp;
use sked_core::Task;
use sked_store::*;

use super::Param;
use crate::codec::{TASK_COLUMNS, col, db_err, tasks_from_rows};
use next_due::Limited;
use positions::{ClaimPositions, Key, NextDue, QueueSetting, filter_key};
use probe::probe;
use sql::{
    Candidates, HEARTBEAT, ORDERED_WALK, ORDERED_WALK_END, QUEUE_SETTINGS, STAGE, STAGE_BATCH,
    claim_sql, grace_ms, parts_to_lock,
};

mod keyed;

pub(crate) use keyed::key_holders;
mod limited;
mod next_due;
pub(crate) mod positions;
mod probe;
pub(crate) mod rated;
pub(crate) mod sql;
pub(crate) mod taking_turns;

/// What every claim of a store works with beside its connection: the pool (the probe and the
/// walks of limited queues run on connections of their own), the channel staging announces
/// on, and what the store remembers between claims.
#[derive(Clone, Copy)]
pub(crate) struct Claims<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) channel: &'a str,
    pub(crate) positions: &'a Arc<ClaimPositions>,
    /// The most tasks in a part of a kept stage, as this store makes them: how many parts a
    /// claim locks (see [`sql::parts_to_lock`]).
    pub(crate) part: usize,
}

pub(crate) async fn claim(
    c: &mut Object,
    claims: Claims<'_>,
    p: &TaskClaimParams,
) -> Result<(Vec<Task>, Option<Timestamp>)> {
    let mut may_stage = true;
    loop {
        if let Some(claimed) = claim_from_position(c, claims, p, may_stage).await? {
            return Ok(claimed);
        }
        may_stage = false;
    }
}

/// One claim from the store's position for `p`'s queues and kinds; `None` when it only
/// staged: claim again (without staging), from before what staging made available.
///
/// When claims resume from a position and a waiting task is known to be due, staging runs
/// alone: the tasks it makes available may lie before that position, and a claim in the same
/// round trip would pass over them. At the end, the claim statement would find nothing anyway,
/// and a claim from the front would walk, with a snapshot held, every task claimed since (a
/// node whose worker keeps up with a steady load is at the end whenever its staging runs, once
/// a second). So a round trip more is paid only when a waiting task comes due.
async fn claim_from_position(
    c: &mut Object,
    claims: Claims<'_>,
    p: &TaskClaimParams,
    may_stage: bool,
) -> Result<Option<(Vec<Task>, Option<Timestamp>)>> {
    let (channel, positions) = (claims.channel, claims.positions);
    let expires = p
        .now
        .checked_add(p.lease_ttl)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let max = i64::from(p.max);
    let filter_key = filter_key(p);
    // Staging and the queue settings only when they may have changed (see `super::next_due`).
    let (stage_first, known_due, known_settings) = positions.before_claim(p.now);
    let stage_first = stage_first && may_stage;
    let start = positions.start(&filter_key, p.now);
    let after = start.after;
    let at_end = after == Some(Key::END);
    // A task known to be due may lie before the position: stage alone, then claim. Staging
    // that only looks (once a second) for what no announcement named runs beside the claim,
    // and what it finds is claimed from the next claim on.
    let stage_alone = stage_first && after.is_some() && (at_end || known_due);
    if start.probe {
        let (pool, positions) = (claims.pool.clone(), positions.clone());
        tokio::spawn(probe(pool, positions, filter_key, after, p.clone(), true));
    }
    let grace = grace_ms(p.timeout_grace);
    let mut params: Vec<Param<'_>> = vec![&p.now, &expires, &p.worker, &max, &grace];
    if let Some(key) = &after {
        params.extend([&key.priority as Param<'_>, &key.run_at, &key.id]);
    }
    let parts = parts_to_lock(p.max, claims.part);
    let with_parts = positions.parts_may_exist();
    let candidates = Candidates::of(
        &p.now,
        &p.queues,
        &p.kinds,
        &p.min_priority,
        with_parts.then_some(&parts),
        &mut params,
    );
    let sql = claim_sql(&candidates, after.is_some(), true, with_parts);
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
                match at_end || stage_alone {
                    true => Ok(Vec::new()),
                    false => c.query(&take, &params).await,
                }
            },
            c.batch_execute(ORDERED_WALK_END)
        )
        .map_err(db_err)?
    };
    // The row with no task: whether released parts were there (see `claim_sql`).
    let (parts, rows): (Vec<_>, Vec<_>) =
        (rows.into_iter()).partition(|r| matches!(r.try_get::<_, Option<i64>>(0), Ok(None)));
    let mut seen = 0;
    for r in &parts {
        seen = seen.max(col::<i32>(r, r.len() - 1)?);
    }
    let parts_left = seen == sql::PARTS_OF_THIS_CLAIM;
    if with_parts && !(at_end || stage_alone) {
        positions.looked_at_parts(&start, seen >= sql::PARTS_ELSEWHERE);
    }
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
    positions.learnt(&start, next_due, read_settings, p.now);
    if let Some(row) = &staged
        && let (Some(top), Some(first)) = (col(row, 0)?, col(row, 1)?)
    {
        positions.move_back(Key::before(top, first));
    }
    if stage_alone {
        return Ok(None);
    }
    // A short claim over every priority walked to the end of the open queues' claimable
    // tasks: the next ones start after the end, until an announcement or the probe moves them
    // back, instead of walking again past every task of a limited or paused queue.
    // Parts held by other claims, or left by this one, are not at the end.
    let exhausted = claimed.len() < p.max as usize && p.min_priority.is_none() && !parts_left;
    positions.finish(start, claimed.last().map(Key::of), exhausted);
    let left = p.max.saturating_sub(claimed.len() as u32);
    let mut held_until = None;
    if left > 0 && !(locked.is_empty() && rated.is_empty()) {
        let (reserved, held) = match rated.is_empty() {
            true => Default::default(),
            false => rated::reserve(c, &rated, left, p.now).await?,
        };
        held_until = held;
        if !(locked.is_empty() && reserved.is_empty()) {
            let (more, held) =
                limited::claim_limited(c, claims, p, &locked, &reserved, left, expires).await?;
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
        Some(row) => {
            if let Some(progress) = &p.progress {
                // After the lease: a heartbeat that held nothing keeps nothing.
                c.execute(
                    "INSERT INTO sked_task_progress (task_id, attempt, progress) VALUES ($1, $2, $3) \
                     ON CONFLICT (task_id) DO UPDATE SET attempt = excluded.attempt, \
                       progress = excluded.progress",
                    &[&p.id, &p.attempt, progress],
                )
                .await
                .map_err(db_err)?;
            }
            Ok(HeartbeatReply {
                cancel_requested: col(&row, 0)?,
                lease_expires_at: col(&row, 1)?,
            })
        }
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
