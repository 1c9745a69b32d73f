//! Claimers at once: several stores on the same data (nodes), each with claimers of its own,
//! while tasks arrive on every store, run and retry, and (on a backend that announces changes)
//! announcements are lost. Each claim is checked as it answers, and the whole run against the
//! wake-up bound, so that what a backend keeps between claims can neither hand a task out twice,
//! nor break a limit, nor leave a due task behind.
//!
//! Unlike the other cases it needs several stores, so a backend calls it from a test of its own
//! with [`ClaimersRun`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_core::{TaskId, TaskState};

use super::*;

/// The longest a due task of an open, unlimited queue may wait for a claim that would take
/// it, with claimers asking all the time. A store that keeps no state meets it at once; one
/// that keeps claim positions or when staging is due looks from the front and stages at least
/// once a second, so a lost announcement costs at most about that.
pub const WAKE_UP_BOUND: SignedDuration = SignedDuration::from_secs(3);

/// Something that makes a backend lose its announcements (PostgreSQL: ends its LISTEN
/// connections), run now and then during the run.
pub type LoseAnnouncements =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A concurrent run: `stores` on the same data, and what makes them lose announcements.
pub struct ClaimersRun {
    pub stores: Vec<Shared>,
    pub lose_announcements: Option<LoseAnnouncements>,
}

const QUEUES: [&str; 5] = ["c-open", "c-busy", "c-limited", "c-keyed", "c-strict"];
const LIMIT: u32 = 2;
/// Low-priority tasks due from the start, more than the claimers take in the first seconds.
const BACKLOG: usize = 1000;
const PER_KEY: u32 = 1;
const KEYS: [&str; 3] = ["a", "b", "c"];
const KINDS: [&str; 2] = ["k0", "k1"];

/// What the claimers saw, shared between them.
#[derive(Default)]
struct Seen {
    /// Tasks held now, by id: the attempt and the queue (and key).
    held: HashMap<TaskId, (i32, String, Option<String>)>,
    /// Every (task, attempt) ever claimed.
    attempts: HashSet<(TaskId, i32)>,
    /// Per task: when the claim that first took it started.
    first_claimed: HashMap<TaskId, Timestamp>,
    /// Later attempts of the open queues' tasks above the backlog's priority claimed longer
    /// than the bound after they were due again: (task, attempt, due, claim started).
    late_retries: Vec<(TaskId, i32, Timestamp, Timestamp)>,
    /// Every claim, in the order they answered.
    claims: Vec<ClaimRecord>,
    /// Per task: when the claim that first took it answered.
    first_answered: HashMap<TaskId, Timestamp>,
    /// Per task that succeeded: when its success was sent.
    success_sent: HashMap<TaskId, Timestamp>,
}

/// One claim: when it started and answered, what it asked for and what it took.
struct ClaimRecord {
    started: Timestamp,
    answered: Timestamp,
    queues: Vec<String>,
    kinds: Vec<String>,
    min_priority: Option<i32>,
    max: usize,
    /// The claim order of what it took: (priority, run time, id).
    took: Vec<(i32, Timestamp, TaskId)>,
}

impl ClaimRecord {
    fn asks_for(&self, queue: &str, kind: &str, priority: i32) -> bool {
        (self.queues.is_empty() || self.queues.iter().any(|q| q == queue))
            && (self.kinds.is_empty() || self.kinds.iter().any(|k| k == kind))
            && self.min_priority.is_none_or(|m| priority >= m)
    }

    /// Whether it took fewer than it could, or something after `(priority, run_at, id)` in
    /// claim order.
    fn passed_over(&self, priority: i32, run_at: Timestamp, id: TaskId) -> bool {
        let before = |t: &(i32, Timestamp, TaskId)| (-t.0, t.1, t.2) < (-priority, run_at, id);
        self.took.len() < self.max || !self.took.iter().all(before)
    }
}

impl Seen {
    fn held_in(&self, queue: &str) -> u32 {
        self.held.values().filter(|h| h.1 == queue).count() as u32
    }

    fn held_with(&self, queue: &str, key: &str) -> u32 {
        self.held
            .values()
            .filter(|h| h.1 == queue && h.2.as_deref() == Some(key))
            .count() as u32
    }
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

/// A backlog of low-priority tasks first, so that claims rarely reach the end of what is due
/// and their positions matter; then inserts for `secs` seconds on every store in turn, while
/// three claimers a store claim and end what they take (a tenth fails and retries after 100 ms
/// to 1 s; the first store has none), and announcements are lost every 700 ms. Every claim answers only due tasks of the
/// queues and kinds it asked for, of at least its priority, none held by another claim, within
/// the concurrency and per-key limits; every task ends; no claim that started
/// [`WAKE_UP_BOUND`] after a task of an open queue was due passed over it (took fewer than it
/// asked for, or a task after it in claim order) while no other claim held it; and each task
/// of the open queues above the backlog's priority was first claimed within that bound.
pub async fn concurrent_claims_keep_the_contract(run: ClaimersRun, secs: u64) {
    let stores = run.stores;
    let first = stores[0].clone();
    for (queue, limit, per_key, key_order) in [
        ("c-limited", Some(LIMIT), None, None),
        ("c-keyed", None, Some(PER_KEY), None),
        ("c-strict", None, Some(1), Some(KeyOrder::Strict)),
    ] {
        first
            .queue_update(QueueUpdateParams {
                name: queue.into(),
                paused: None,
                concurrency_limit: limit.map(Some),
                rate: None,
                per_key: per_key.map(Some),
                per_key_rate: None,
                retention: Vec::new(),
                backoff: None,
                key_order,
                now: None,
                must_exist: false,
            })
            .await
            .unwrap();
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    // Each task as inserted, and when it was due and committed, by id.
    let due: Arc<Mutex<BTreeMap<TaskId, (NewTask, Timestamp)>>> = Arc::default();
    let now = Timestamp::now();
    let backlog: Vec<NewTask> = (0..BACKLOG)
        .map(|_| retried_soon(task("k0").queue("c-busy").priority(-1).run_at(now)))
        .collect();
    for (t, i) in backlog
        .iter()
        .zip(insert_batch(&first, &backlog, now).await)
    {
        due.lock().unwrap().insert(i.id, (t.clone(), now));
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let mut claimers = tokio::task::JoinSet::new();
    // The first store only inserts: what it inserts reaches the others' claims through
    // announcements, and when those are lost, through what the stores do without them.
    for (s, store) in stores.iter().enumerate().skip(1) {
        for c in 0..3 {
            let (store, seen, stop) = (store.clone(), seen.clone(), stop.clone());
            // The first claimer of each store asks for everything; the others filter.
            let filtered = c > 0;
            claimers.spawn(async move {
                let mut rng = Rng((s * 10 + c) as u64 + 1);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    claim_and_end(&store, &seen, &mut rng, filtered, &format!("w{s}-{c}")).await;
                    tokio::time::sleep(Duration::from_millis(2 + rng.below(8))).await;
                }
            });
        }
    }
    let chaos = run.lose_announcements.map(|lose| {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(700)).await;
                lose().await;
            }
        })
    });

    // Inserts on every store in turn, about 100 tasks a second.
    let mut rng = Rng(7);
    let started = std::time::Instant::now();
    let mut inserted = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        let store = &stores[inserted % stores.len()];
        let now = Timestamp::now();
        let tasks: Vec<NewTask> = (0..1 + rng.below(8))
            .map(|_| {
                let queue = QUEUES[rng.below(QUEUES.len() as u64) as usize];
                let offset = rng.below(2500) as i64 - 1000;
                let mut t = task(KINDS[rng.below(KINDS.len() as u64) as usize])
                    .queue(queue)
                    .priority(rng.below(3) as i32)
                    .run_at(
                        now.checked_add(SignedDuration::from_millis(offset))
                            .unwrap(),
                    );
                t = retried_soon(t);
                if queue == "c-keyed" || queue == "c-strict" {
                    t = t.key(KEYS[rng.below(KEYS.len() as u64) as usize]);
                }
                // A dead task would stop its key for good: these retry until they succeed.
                if queue == "c-strict" {
                    t = t.max_attempts(25);
                }
                t
            })
            .collect();
        let ids = insert_batch(store, &tasks, now).await;
        let committed = Timestamp::now();
        {
            let mut due = due.lock().unwrap();
            for (t, i) in tasks.iter().zip(&ids) {
                due.insert(i.id, (t.clone(), t.run_at.unwrap().max(committed)));
            }
        }
        inserted += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Every task ends: the claimers go on until none is unfinished.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ids: Vec<TaskId> = due.lock().unwrap().keys().copied().collect();
    loop {
        let mut unfinished = Vec::new();
        for id in &ids {
            let t = first.task_get(*id).await.unwrap();
            if !matches!(t.state, TaskState::Succeeded | TaskState::Dead) {
                unfinished.push((t.id, t.state, t.queue, t.run_at));
            }
        }
        if unfinished.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tasks left unfinished 60 s after the last insert: {unfinished:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    while let Some(r) = claimers.join_next().await {
        r.expect("a claimer panicked");
    }
    if let Some(chaos) = chaos {
        chaos.await.unwrap();
    }

    let seen = lock(&seen);
    assert!(seen.claims.len() > 100, "only {} claims", seen.claims.len());
    // In strict order a task that started holds its key until it succeeds: each task of a key
    // was first taken after the one taken before it succeeded.
    let mut by_key: BTreeMap<String, Vec<TaskId>> = BTreeMap::new();
    for (id, (t, _)) in due.lock().unwrap().iter() {
        if let (true, Some(key)) = (t.queue == "c-strict", &t.key) {
            by_key.entry(key.clone()).or_default().push(*id);
        }
    }
    for (key, ids) in by_key.iter_mut() {
        ids.sort_by_key(|id| seen.first_answered[id]);
        for pair in ids.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            let succeeded = seen.success_sent[&before];
            let taken = seen.first_answered[&after];
            assert!(
                taken > succeeded,
                "key {key} of c-strict: task {after} was taken at {taken}, before task {before}, \
                 taken earlier, succeeded (sent at {succeeded})"
            );
        }
    }
    let strict: usize = by_key.values().map(Vec::len).sum();
    let (mut late, mut passed) = (Vec::new(), Vec::new());
    let mut slowest = SignedDuration::ZERO;
    for (id, (t, at)) in due.lock().unwrap().iter() {
        if t.queue != "c-open" && t.queue != "c-busy" {
            continue;
        }
        let claimed = seen.first_claimed[id];
        let wait = claimed.duration_since(*at);
        slowest = slowest.max(wait);
        if wait > WAKE_UP_BOUND && t.priority >= 0 {
            late.push((*id, t.queue.clone(), wait));
        }
        let bound = at.checked_add(WAKE_UP_BOUND).unwrap();
        let run_at = t.run_at.unwrap();
        for c in seen
            .claims
            .iter()
            .filter(|c| c.started >= bound && c.answered < claimed)
        {
            if c.asks_for(&t.queue, &t.kind, t.priority) && c.passed_over(t.priority, run_at, *id) {
                passed.push((*id, t.priority, run_at, c.started, c.took.clone()));
            }
        }
    }
    assert!(
        passed.is_empty(),
        "{} claims passed over a task due {WAKE_UP_BOUND:?} before they started: {:?}",
        passed.len(),
        &passed[..passed.len().min(5)]
    );
    assert!(
        seen.late_retries.is_empty(),
        "retries claimed later than {WAKE_UP_BOUND:?} after they were due: {:?}",
        seen.late_retries
    );
    assert!(
        late.is_empty(),
        "{} of {} tasks were first claimed later than {WAKE_UP_BOUND:?} after they were due: {late:?}",
        late.len(),
        ids.len()
    );
    eprintln!(
        "{} tasks ({strict} in strict order), {} claims in {:.1?}; the longest wait of an open \
         queue's task: {slowest:?}",
        ids.len(),
        seen.claims.len(),
        started.elapsed()
    );
}

/// At most three attempts, 100 ms to 1 s apart.
fn retried_soon(t: NewTask) -> NewTask {
    t.max_attempts(3).backoff(
        SignedDuration::from_millis(100),
        SignedDuration::from_secs(1),
    )
}

/// One claim, checked as it answers, and the endings of what it took.
async fn claim_and_end(
    store: &Shared,
    seen: &Mutex<Seen>,
    rng: &mut Rng,
    filtered: bool,
    worker: &str,
) {
    let queues: Vec<String> = match filtered && rng.chance(50) {
        true => QUEUES
            .iter()
            .filter(|_| rng.chance(50))
            .map(|q| q.to_string())
            .collect(),
        false => vec![],
    };
    let kinds: Vec<String> = match filtered && rng.chance(25) {
        true => vec![KINDS[rng.below(KINDS.len() as u64) as usize].to_string()],
        false => vec![],
    };
    let min_priority = (filtered && rng.chance(20)).then_some(1);
    let now = Timestamp::now();
    let max = 1 + rng.below(10) as u32;
    let p = TaskClaimParams {
        queues: queues.clone(),
        kinds: kinds.clone(),
        max,
        min_priority,
        worker: worker.into(),
        lease_ttl: TTL,
        timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
        now,
    };
    let claimed = store.task_claim(p).await.unwrap();
    // A claim may run later than the `now` it was given (waiting for a connection, say) and
    // take a task that became due meanwhile; it must not take one due after it answered.
    let answered = Timestamp::now();
    {
        let mut s = lock(seen);
        s.claims.push(ClaimRecord {
            started: now,
            answered,
            queues: queues.clone(),
            kinds: kinds.clone(),
            min_priority,
            max: max as usize,
            took: claimed
                .iter()
                .map(|t| (t.priority, t.run_at, t.id))
                .collect(),
        });
        for t in &claimed {
            assert!(
                t.run_at <= answered,
                "task {} claimed by {answered}, due {}",
                t.id,
                t.run_at
            );
            assert!(
                queues.is_empty() || queues.contains(&t.queue),
                "task {} of queue {}",
                t.id,
                t.queue
            );
            assert!(
                kinds.is_empty() || kinds.contains(&t.kind),
                "task {} of kind {}",
                t.id,
                t.kind
            );
            assert!(
                min_priority.is_none_or(|m| t.priority >= m),
                "task {} of priority {}",
                t.id,
                t.priority
            );
            assert_eq!(t.state, TaskState::Running);
            assert!(
                s.attempts.insert((t.id, t.attempt)),
                "attempt {} of task {} claimed twice",
                t.attempt,
                t.id
            );
            assert!(
                !s.held.contains_key(&t.id),
                "task {} claimed by {worker} while another claim holds it",
                t.id
            );
            s.held
                .insert(t.id, (t.attempt, t.queue.clone(), t.key.clone()));
            s.first_claimed.entry(t.id).or_insert(now);
            s.first_answered.entry(t.id).or_insert(answered);
            let open = t.queue == "c-open" || t.queue == "c-busy";
            let bound = t.run_at.checked_add(WAKE_UP_BOUND).unwrap();
            // A retry of the backlog's priority comes after the backlog tasks due before it,
            // however long they take: only those above it must be taken within the bound.
            if open && t.attempt > 1 && t.priority >= 0 && now > bound {
                s.late_retries.push((t.id, t.attempt, t.run_at, now));
            }
        }
        assert!(
            s.held_in("c-limited") <= LIMIT,
            "{} tasks of c-limited held, its limit is {LIMIT}",
            s.held_in("c-limited")
        );
        for key in KEYS {
            assert!(
                s.held_with("c-keyed", key) <= PER_KEY,
                "{} tasks of key {key} held, the per-key limit is {PER_KEY}",
                s.held_with("c-keyed", key)
            );
            assert!(
                s.held_with("c-strict", key) <= 1,
                "{} tasks of key {key} of c-strict held at once",
                s.held_with("c-strict", key)
            );
        }
    }
    if claimed.is_empty() {
        return;
    }
    tokio::time::sleep(Duration::from_millis(rng.below(10))).await;
    let endings: Vec<TaskFinishParams> = claimed
        .iter()
        .map(|t| TaskFinishParams {
            id: t.id,
            attempt: t.attempt,
            outcome: match rng.chance(10) {
                true => failed(true),
                false => FinishOutcome::Succeeded { result: None },
            },
            now: Timestamp::now(),
            jitter: rng.below(1000) as f64 / 1000.0,
        })
        .collect();
    // No longer held once the ending is sent: a claim that finds the room before the ending
    // commits would break the limit in the store too.
    {
        let mut s = lock(seen);
        let sent = Timestamp::now();
        for (t, e) in claimed.iter().zip(&endings) {
            s.held.remove(&t.id);
            if matches!(e.outcome, FinishOutcome::Succeeded { .. }) {
                s.success_sent.insert(t.id, sent);
            }
        }
    }
    for r in store.task_finish_many_lean(endings).await.unwrap() {
        r.unwrap();
    }
}
