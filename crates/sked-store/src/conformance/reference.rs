//! The reference claim: a stateless statement of what a claim may take, read from the tasks as
//! listed and the queues' settings, against which random sequences of inserts, claims, endings,
//! pauses, limits and time check a backend's claim, whatever it keeps in memory between claims
//! (claim positions, when staging is due, queue settings).

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;
use sked_core::{Task, TaskId, TaskState};

use super::*;

const QUEUES: [&str; 4] = ["q0", "q1", "q2", "q3"];
const KINDS: [&str; 3] = ["k0", "k1", "k2"];
const KEYS: [&str; 3] = ["a", "b", "c"];

/// A queue's settings as the sequence set them.
#[derive(Debug, Clone, Copy, Default)]
struct Settings {
    paused: bool,
    limit: Option<u32>,
    /// Strict order per key (with a per-key limit of 1); the sequences never give such a queue
    /// a concurrency limit too.
    strict: bool,
}

/// Whether `t` holds its key in strict order: it started and has not ended well, and is not
/// running (a running task holds its key by the per-key limit of 1).
fn holds_its_key(t: &Task) -> bool {
    use TaskState::*;
    t.attempt > 0 && matches!(t.state, Scheduled | Available | Retrying | Dead)
}

/// What the reference says of a claim: the tasks it may take, in claim order, each queue's
/// eligible tasks already cut to the room its concurrency limit leaves. In a queue with strict
/// order per key a key runs one task at a time: while none of its key runs, the task that
/// holds the key (the first by id that started and has not ended well) if one does, else the
/// key's first in claim order.
fn reference(
    tasks: &[Task],
    settings: &BTreeMap<&str, Settings>,
    p: &TaskClaimParams,
) -> Vec<TaskId> {
    let mut running: BTreeMap<&str, u32> = BTreeMap::new();
    for t in tasks.iter().filter(|t| t.state == TaskState::Running) {
        *running.entry(t.queue.as_str()).or_default() += 1;
    }
    let mut eligible: Vec<&Task> = tasks
        .iter()
        .filter(|t| match t.state {
            TaskState::Available => true,
            TaskState::Scheduled | TaskState::Retrying => t.run_at <= p.now,
            _ => false,
        })
        .filter(|t| crate::expiry::may_start(t, p.now))
        .filter(|t| p.queues.is_empty() || p.queues.contains(&t.queue))
        .filter(|t| p.kinds.is_empty() || p.kinds.contains(&t.kind))
        .filter(|t| p.min_priority.is_none_or(|min| t.priority >= min))
        .filter(|t| !settings.get(t.queue.as_str()).is_some_and(|s| s.paused))
        .filter(|t| {
            let strict = settings.get(t.queue.as_str()).is_some_and(|s| s.strict);
            let Some(key) = t.key.as_ref().filter(|_| strict) else {
                return true;
            };
            let of_key =
                || (tasks.iter()).filter(|o| o.queue == t.queue && o.key.as_ref() == Some(key));
            let holder = of_key().filter(|o| holds_its_key(o)).map(|o| o.id).min();
            holder.is_none_or(|h| h == t.id) && !of_key().any(|o| o.state == TaskState::Running)
        })
        .collect();
    eligible.sort_by_key(|t| (std::cmp::Reverse(t.priority), t.run_at, t.id));
    // A strict queue's key starts one task per claim: its first in claim order.
    let mut keys_taken: BTreeSet<(&str, &str)> = BTreeSet::new();
    eligible.retain(|t| {
        let strict = settings.get(t.queue.as_str()).is_some_and(|s| s.strict);
        match t.key.as_deref().filter(|_| strict) {
            Some(key) => keys_taken.insert((t.queue.as_str(), key)),
            None => true,
        }
    });
    let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
    eligible
        .into_iter()
        .filter(|t| {
            let q = t.queue.as_str();
            let room = match settings.get(q).and_then(|s| s.limit) {
                Some(limit) => limit.saturating_sub(running.get(q).copied().unwrap_or(0)),
                None => u32::MAX,
            };
            let n = taken.entry(q).or_default();
            *n += 1;
            *n <= room
        })
        .map(|t| t.id)
        .collect()
}

/// Every task, in pages.
async fn all_tasks(store: &Shared) -> Vec<Task> {
    let mut out = Vec::new();
    let mut before_id = None;
    loop {
        let page = store
            .task_list(TaskListParams {
                before_id,
                limit: 1000,
                ..TaskListParams::default()
            })
            .await
            .unwrap();
        let Some(last) = page.items.last() else {
            return out;
        };
        before_id = Some(last.id);
        let more = page.more;
        out.extend(page.items);
        if !more {
            return out;
        }
    }
}

/// Random sequences of inserts, claims, endings, pauses, limits and time. After each claim:
/// every task taken is one the reference allows; it takes as many as the reference allows, up
/// to its `max`; within each queue it takes the first in claim order; and when no queue in
/// play is limited, it takes exactly the reference's first `max`. So a claim never passes over a
/// due task, whatever a backend keeps between claims.
pub async fn claims_agree_with_the_reference_claim(store: &Shared) {
    // The queues' settings as the sequences set them; the tasks of earlier sequences stay.
    let mut settings = BTreeMap::new();
    // `SKED_REFERENCE_SEEDS=N` runs seeds 1 to N (3 by default), to search longer.
    let seeds = std::env::var("SKED_REFERENCE_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3_u64);
    for seed in 1..=seeds {
        run_sequence(store, seed, &mut settings).await;
    }
}

async fn run_sequence(store: &Shared, seed: u64, settings: &mut BTreeMap<String, Settings>) {
    let mut rng = Rng(seed);
    // Each sequence has queues of its own; a claim of every queue sees earlier ones' too.
    let queue = |i: u64| format!("{}-{seed}", QUEUES[i as usize]);
    let names: Vec<String> = (0..QUEUES.len() as u64).map(queue).collect();
    let mut now = t0()
        .checked_add(SignedDuration::from_hours(seed as i64))
        .unwrap();
    for step in 0..160 {
        let what = rng.below(100);
        let context = format!("seed {seed}, step {step}");
        if what < 30 {
            let n = 1 + rng.below(12);
            let tasks: Vec<NewTask> = (0..n)
                .map(|_| {
                    let offset = rng.below(60) as i64 - 30;
                    let mut t = task(KINDS[rng.below(3) as usize])
                        .queue(names[rng.below(4) as usize].clone())
                        .priority(rng.below(4) as i32 - 1)
                        .run_at(now.checked_add(SignedDuration::from_secs(offset)).unwrap());
                    if rng.chance(60) {
                        t.key = Some(KEYS[rng.below(3) as usize].to_string());
                    }
                    // Some must start within a deadline, which passes as time moves on.
                    match rng.chance(25) {
                        true => t.ttl(SignedDuration::from_secs(
                            (-offset).max(0) + 1 + rng.below(30) as i64,
                        )),
                        false => t,
                    }
                })
                .collect();
            let ids = insert_batch(store, &tasks, now).await;
            trace(&context, || format!("insert at {now}: {ids:?} {tasks:?}"));
        } else if what < 65 {
            // Every queue, or some of this sequence's.
            let queues: Vec<String> = match rng.below(3) {
                0 => vec![],
                _ => names.iter().filter(|_| rng.chance(50)).cloned().collect(),
            };
            let kinds: Vec<String> = match rng.below(3) {
                0 => KINDS
                    .iter()
                    .filter(|_| rng.chance(60))
                    .map(|k| k.to_string())
                    .collect(),
                _ => vec![],
            };
            let p = TaskClaimParams {
                queues,
                kinds,
                max: 1 + rng.below(15) as u32,
                min_priority: rng.chance(15).then_some(0),
                worker: "w1".into(),
                lease_ttl: TTL,
                timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
                now,
            };
            let before = all_tasks(store).await;
            let by_name: BTreeMap<&str, Settings> =
                settings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let allowed = reference(&before, &by_name, &p);
            let claimed = store.task_claim(p.clone()).await.unwrap();
            trace(&context, || {
                let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
                format!("claim {p:?}: {ids:?}")
            });
            check_claim(&context, &before, &by_name, &p, &allowed, &claimed);
        } else if what < 85 {
            let running: Vec<Task> = all_tasks(store)
                .await
                .into_iter()
                .filter(|t| t.state == TaskState::Running && names.contains(&t.queue))
                .collect();
            for t in &running {
                if !rng.chance(50) {
                    continue;
                }
                let outcome = match rng.below(3) {
                    0 => FinishOutcome::Succeeded { result: None },
                    1 => failed(true),
                    _ => failed(false),
                };
                trace(&context, || {
                    format!("finish {} at {now}: {outcome:?}", t.id)
                });
                finish(store, t.id, t.attempt, outcome, now).await.unwrap();
            }
        } else if what < 93 {
            now = now
                .checked_add(SignedDuration::from_millis(rng.below(20_000) as i64))
                .unwrap();
            if rng.chance(30) {
                let p = TaskExpireParams { now, limit: 1000 };
                let expired = store.task_expire(p).await.unwrap();
                trace(&context, || format!("expire at {now}: {expired:?}"));
            }
        } else {
            let name = names[rng.below(4) as usize].clone();
            let s = settings.entry(name.clone()).or_default();
            let mut update = QueueUpdateParams {
                name,
                paused: None,
                concurrency_limit: None,
                rate: None,
                per_key: None,
                per_key_rate: None,
                retention: Vec::new(),
                backoff: None,
                key_order: None,
                now: None,
                must_exist: false,
            };
            match rng.below(3) {
                0 => {
                    s.paused = !s.paused;
                    update.paused = Some(s.paused);
                }
                1 => {
                    s.limit = rng.chance(60).then(|| 1 + rng.below(3) as u32);
                    update.concurrency_limit = Some(s.limit);
                    if s.limit.is_some() && s.strict {
                        s.strict = false;
                        update.per_key = Some(None);
                        update.key_order = Some(KeyOrder::Priority);
                    }
                }
                _ => {
                    s.strict = !s.strict;
                    update.per_key = Some(s.strict.then_some(1));
                    update.key_order = Some(match s.strict {
                        true => KeyOrder::Strict,
                        false => KeyOrder::Priority,
                    });
                    if s.strict {
                        s.limit = None;
                        update.concurrency_limit = Some(None);
                    }
                }
            }
            trace(&context, || format!("queue {update:?}"));
            store.queue_update(update).await.unwrap();
        }
    }
}

/// Prints a step when `SKED_REFERENCE_TRACE` is set, to follow a failing sequence.
fn trace(context: &str, line: impl FnOnce() -> String) {
    if std::env::var_os("SKED_REFERENCE_TRACE").is_some() {
        eprintln!("{context}: {}", line());
    }
}

fn check_claim(
    context: &str,
    before: &[Task],
    settings: &BTreeMap<&str, Settings>,
    p: &TaskClaimParams,
    allowed: &[TaskId],
    claimed: &[Task],
) {
    let allowed_set: BTreeSet<TaskId> = allowed.iter().copied().collect();
    let taken: BTreeSet<TaskId> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(taken.len(), claimed.len(), "{context}: a task taken twice");
    for t in claimed {
        assert!(
            allowed_set.contains(&t.id),
            "{context}: took task {} ({:?}, queue {}, priority {}, due {}), which the reference \
             does not allow; allowed {allowed:?}",
            t.id,
            before.iter().find(|b| b.id == t.id).map(|b| b.state),
            t.queue,
            t.priority,
            t.run_at
        );
        assert_eq!(t.state, TaskState::Running, "{context}");
    }
    let wanted = (p.max as usize).min(allowed.len());
    let shown: Vec<String> = allowed
        .iter()
        .filter_map(|id| before.iter().find(|t| t.id == *id))
        .map(|t| {
            format!(
                "{} {:?} {} p{} {}",
                t.id, t.state, t.queue, t.priority, t.run_at
            )
        })
        .collect();
    assert_eq!(
        claimed.len(),
        wanted,
        "{context}: took {taken:?} of max {} at {} (queues {:?}, kinds {:?}, min {:?}), where \
         the reference allows {shown:?}; settings {settings:?}",
        p.max,
        p.now,
        p.queues,
        p.kinds,
        p.min_priority
    );
    // Within a queue, the first in claim order (keys take turns in a strict queue).
    let queue_of: BTreeMap<TaskId, &str> =
        before.iter().map(|t| (t.id, t.queue.as_str())).collect();
    let mut per_queue: BTreeMap<&str, Vec<TaskId>> = BTreeMap::new();
    for id in allowed {
        per_queue.entry(queue_of[id]).or_default().push(*id);
    }
    let strict = |q: &str| settings.get(q).is_some_and(|s| s.strict);
    for (queue, ids) in per_queue.iter().filter(|(q, _)| !strict(q)) {
        let n = ids.iter().filter(|id| taken.contains(id)).count();
        assert!(
            ids[..n].iter().all(|id| taken.contains(id)),
            "{context}: in queue {queue} took {taken:?}, not the first {n} of {ids:?}"
        );
    }
    // With no limited queue in play, exactly the first `max` in claim order.
    let limited = per_queue
        .keys()
        .any(|q| strict(q) || settings.get(q).is_some_and(|s| s.limit.is_some()));
    if !limited {
        let first: BTreeSet<TaskId> = allowed[..wanted].iter().copied().collect();
        assert_eq!(
            taken, first,
            "{context}: not the first {wanted} in claim order"
        );
    }
}

/// The reference itself on a hand-made table: order, filters, pauses and limits.
#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: TaskId, queue: &str, priority: i32, state: TaskState, run_at: i64) -> Task {
        let mut task: Task = serde_json::from_value(serde_json::json!({
            "id": id, "queue": queue, "kind": "k0", "payload": null, "priority": priority,
            "state": "available", "run_at": at(run_at), "attempt": 0, "max_attempts": 25,
            "timeout": null, "unique_key": null, "backoff": null, "schedule": null,
            "nominal_at": null, "created_at": at(0), "started_at": null, "finished_at": null,
            "lease_expires_at": null, "worker": null, "cancel_requested": false,
            "last_error": null, "result": null
        }))
        .unwrap();
        task.state = state;
        task
    }

    #[test]
    fn the_reference_orders_filters_and_limits() {
        let tasks = vec![
            t(1, "a", 0, TaskState::Available, 0),
            t(2, "a", 1, TaskState::Available, 5),
            t(3, "b", 0, TaskState::Scheduled, 20),
            t(4, "b", 0, TaskState::Retrying, 5),
            t(5, "c", 2, TaskState::Available, 0),
            t(6, "a", 0, TaskState::Running, 0),
            t(7, "a", 0, TaskState::Available, 1),
        ];
        let mut settings = BTreeMap::new();
        settings.insert(
            "c",
            Settings {
                paused: true,
                limit: None,
                strict: false,
            },
        );
        settings.insert(
            "a",
            Settings {
                paused: false,
                limit: Some(2),
                strict: false,
            },
        );
        let p = TaskClaimParams {
            queues: vec![],
            kinds: vec![],
            max: 10,
            min_priority: None,
            worker: "w".into(),
            lease_ttl: TTL,
            timeout_grace: SignedDuration::ZERO,
            now: at(10),
        };
        // `a` has room for one (one of two running), `c` is paused, 3 is not due.
        assert_eq!(reference(&tasks, &settings, &p), vec![2, 4]);
        let p = TaskClaimParams {
            min_priority: Some(1),
            ..p
        };
        assert_eq!(reference(&tasks, &settings, &p), vec![2]);
    }
}
