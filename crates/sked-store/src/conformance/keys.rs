//! Concurrency keys: a queue's per-key limit caps each key's running tasks, keys take turns
//! within a priority across claims, and the setting is stored and shown.

use sked_core::NewTask;

use super::*;

async fn per_key(store: &Shared, queue: &str, n: Option<u32>) -> QueueInfo {
    per_key_change(store, queue, n).await.unwrap()
}

fn keyed(queue: &str, key: Option<&str>, n: usize) -> Vec<NewTask> {
    (0..n)
        .map(|_| {
            let t = NewTask::new("k").queue(queue);
            match key {
                Some(k) => t.key(k),
                None => t,
            }
        })
        .collect()
}

/// The keys of the tasks claimed (`-` for none), in claim order.
fn keys_of(tasks: &[sked_core::Task]) -> Vec<String> {
    tasks
        .iter()
        .map(|t| t.key.clone().unwrap_or_else(|| "-".into()))
        .collect()
}

pub async fn a_per_key_limit_caps_each_key(store: &Shared) {
    assert_eq!(per_key(store, "t", Some(2)).await.per_key, Some(2));
    let mut tasks = keyed("t", Some("a"), 10);
    tasks.extend(keyed("t", Some("b"), 3));
    tasks.extend(keyed("t", None, 2));
    insert_batch(store, &tasks, t0()).await;
    // A worker that names its kinds (and a lowest priority) claims the same way.
    let first = store
        .task_claim(TaskClaimParams {
            min_priority: Some(0),
            queues: vec![],
            kinds: vec!["k".into()],
            max: 10,
            worker: "w1".into(),
            lease_ttl: TTL,
            timeout_grace: crate::rules::DEFAULT_TIMEOUT_GRACE,
            now: t0(),
        })
        .await
        .unwrap();
    let mut got = keys_of(&first);
    got.sort();
    // Two of each key; the tasks without a key are not capped.
    assert_eq!(got, ["-", "-", "a", "a", "b", "b"]);
    assert!(first.iter().all(|t| t.queue == "t"));
    assert!(
        claim(store, 10, at(1)).await.is_empty(),
        "both keys at their limit"
    );
    // One queue's settings and counts, and one key's use of it.
    let q = store.queue_get("t", at(1)).await.unwrap();
    assert_eq!(
        (q.per_key, q.counts.get(&sked_core::TaskState::Running)),
        (Some(2), Some(&6))
    );
    let usage = store
        .queue_key_usage(keyed::KeyUsageParams {
            queue: "t".into(),
            key: "a".into(),
            since: t0(),
            strict: false,
        })
        .await
        .unwrap();
    assert_eq!((usage.running, usage.starts.len()), (2, 0));
    let none = store.queue_get("never", at(1)).await.unwrap_err();
    assert_eq!(
        none.kind(),
        ErrorKind::NotFound,
        "no task or setting names it"
    );
    // One of A ends: one more of A may start.
    let a = first
        .iter()
        .find(|t| t.key.as_deref() == Some("a"))
        .unwrap();
    finish(
        store,
        a.id,
        1,
        FinishOutcome::Succeeded { result: None },
        at(2),
    )
    .await
    .unwrap();
    assert_eq!(keys_of(&claim(store, 10, at(3)).await), ["a"]);
    // The task keeps its key; the queue shows its limit, and removing it lifts the cap.
    assert_eq!(
        store.task_get(a.id).await.unwrap().key.as_deref(),
        Some("a")
    );
    let page = store
        .queue_list(QueueListParams {
            after: None,
            limit: 10,
            count_limit: QUEUE_COUNT_LIMIT,
            now: at(3),
        })
        .await
        .unwrap();
    assert_eq!(page.items[0].per_key, Some(2));
    assert_eq!(per_key(store, "t", None).await.per_key, None);
    assert_eq!(claim(store, 100, at(4)).await.len(), 8);
}

pub async fn keys_take_turns_across_claims(store: &Shared) {
    per_key(store, "t", Some(100)).await;
    // A's backlog is enqueued first, then B's and C's.
    let mut tasks = keyed("t", Some("a"), 20);
    tasks.extend(keyed("t", Some("b"), 5));
    tasks.extend(keyed("t", Some("c"), 5));
    insert_batch(store, &tasks, t0()).await;
    let mut claims = Vec::new();
    for i in 0..6 {
        let mut keys = keys_of(&claim(store, 2, at(i)).await);
        keys.sort();
        claims.push(keys.join(""));
    }
    assert_eq!(
        claims,
        ["ab", "ac", "bc", "ab", "ac", "bc"],
        "one task of each key in turn, the turn carried from claim to claim"
    );
    // A claim over named queues takes turns too.
    let named = claim_from(store, &["t"], 3, at(7)).await;
    let mut got = keys_of(&named);
    got.sort();
    assert_eq!(got, ["a", "b", "c"]);
}

pub async fn a_higher_priority_goes_first_across_keys(store: &Shared) {
    per_key(store, "t", Some(5)).await;
    let mut tasks = keyed("t", Some("a"), 3);
    tasks.push(NewTask::new("k").queue("t").key("b").priority(5));
    insert_batch(store, &tasks, t0()).await;
    let got = claim(store, 1, at(1)).await;
    assert_eq!(
        (got[0].key.as_deref(), got[0].priority),
        (Some("b"), 5),
        "a later, higher task of another key first"
    );
    // Invalid keys are refused.
    let too_long = NewTask::new("k").key("x".repeat(513));
    let err = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![too_long.into()],
            now: at(2),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
}

pub async fn a_per_key_rate_caps_each_keys_starts(store: &Shared) {
    let two_a_second: sked_core::RateLimit = "2/s".parse().unwrap();
    let q = store
        .queue_update(QueueUpdateParams {
            name: "t".into(),
            per_key_rate: Some(Some(two_a_second)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.per_key_rate, Some(two_a_second));
    let mut tasks = keyed("t", Some("a"), 5);
    tasks.extend(keyed("t", Some("b"), 5));
    insert_batch(store, &tasks, t0()).await;
    let ms = |n: i64| t0() + jiff::SignedDuration::from_millis(n);
    let mut got = keys_of(&claim(store, 10, ms(0)).await);
    got.sort();
    assert_eq!(
        got,
        ["a", "a", "b", "b"],
        "two starts of each key per second"
    );
    assert!(
        claim(store, 10, ms(500)).await.is_empty(),
        "both windows are full"
    );
    let usage = store
        .queue_key_usage(keyed::KeyUsageParams {
            queue: "t".into(),
            key: "b".into(),
            since: ms(-1),
            strict: false,
        })
        .await
        .unwrap();
    assert_eq!(
        usage.starts,
        [(ms(0), 2)],
        "one claim's starts of b, logged once"
    );
    assert_eq!(
        claim(store, 10, ms(1_000)).await.len(),
        4,
        "a second later, two each again"
    );
    assert!(claim(store, 10, ms(1_500)).await.is_empty());
    // Removed: the rest may start at once.
    store
        .queue_update(QueueUpdateParams {
            name: "t".into(),
            per_key_rate: Some(None),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(claim(store, 10, ms(1_600)).await.len(), 2);
}

/// Sets `queue`'s per-key limit and key order.
async fn order(
    store: &Shared,
    queue: &str,
    per_key: Option<u32>,
    key_order: KeyOrder,
) -> Result<QueueInfo> {
    store
        .queue_update(QueueUpdateParams {
            name: queue.into(),
            per_key: Some(per_key),
            key_order: Some(key_order),
            ..Default::default()
        })
        .await
}

/// The ids claimed from `queue`, in order.
async fn claim_ids(store: &Shared, queue: &str, now: Timestamp) -> Vec<sked_core::TaskId> {
    let mut ids: Vec<_> = claim_from(store, &[queue], 10, now)
        .await
        .iter()
        .map(|t| t.id)
        .collect();
    ids.sort();
    ids
}

async fn first_of(store: &Shared, queue: &str, key: &str) -> Option<Behind> {
    store
        .queue_key_usage(keyed::KeyUsageParams {
            queue: queue.into(),
            key: key.into(),
            since: t0(),
            strict: true,
        })
        .await
        .unwrap()
        .holder
}

pub async fn strict_order_starts_a_keys_tasks_one_after_another(store: &Shared) {
    use sked_core::TaskState::*;
    // Strict order needs a per-key limit of 1; a refusal changes nothing.
    let e = order(store, "s2", Some(2), KeyOrder::Strict)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("per-key limit of 1"), "{e}");
    assert_eq!(
        store.queue_get("s2", t0()).await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "nothing was created"
    );
    let q = order(store, "s", Some(1), KeyOrder::Strict).await.unwrap();
    assert_eq!((q.per_key, q.key_order), (Some(1), KeyOrder::Strict));
    let e = per_key_change(store, "s", Some(2)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    let q = store.queue_get("s", t0()).await.unwrap();
    assert_eq!((q.per_key, q.key_order), (Some(1), KeyOrder::Strict));
    assert_eq!(q.keys_stopped, Some(0));

    // A runs one task at a time, in claim order; B is another key.
    let ins = insert_batch(
        store,
        &[
            task("k").queue("s").key("a"),
            task("k").queue("s").key("a"),
            task("k").queue("s").key("b"),
        ],
        t0(),
    )
    .await;
    let [a1, a2, b1] = [ins[0].id, ins[1].id, ins[2].id];
    assert_eq!(claim_ids(store, "s", at(1)).await, [a1, b1]);
    // A's first fails and waits to retry: it keeps A, even against a task of a higher
    // priority enqueued meanwhile; B goes on.
    let retrying = finish(store, a1, 1, failed(true), at(2)).await.unwrap();
    assert_eq!(retrying.state, Retrying);
    let a3 = insert(store, task("k").queue("s").key("a").priority(5), at(2))
        .await
        .id;
    assert!(claim_ids(store, "s", at(2)).await.is_empty());
    assert_eq!(
        first_of(store, "s", "a").await,
        Some(Behind {
            id: a1,
            state: Retrying
        })
    );
    finish(
        store,
        b1,
        1,
        FinishOutcome::Succeeded { result: None },
        at(3),
    )
    .await
    .unwrap();
    let b2 = insert(store, task("k").queue("s").key("b"), at(3)).await.id;
    assert_eq!(claim_ids(store, "s", at(3)).await, [b2], "B is not delayed");
    // Its retry is due: it runs again, fails for good, and stops A.
    let due = retrying.run_at;
    assert_eq!(claim_ids(store, "s", due).await, [a1]);
    let dead = finish(store, a1, 2, failed(false), due).await.unwrap();
    assert_eq!(dead.state, Dead);
    let later = due.checked_add(SignedDuration::from_hours(1)).unwrap();
    assert!(claim_ids(store, "s", later).await.is_empty());
    assert_eq!(
        first_of(store, "s", "a").await,
        Some(Behind {
            id: a1,
            state: Dead
        })
    );
    assert_eq!(
        store.queue_get("s", later).await.unwrap().keys_stopped,
        Some(1)
    );
    // Retried, it runs first; then the tasks that never started, in claim order.
    store
        .task_retry(TaskRetryParams { id: a1, now: later })
        .await
        .unwrap();
    assert_eq!(claim_ids(store, "s", later).await, [a1]);
    let ok = || FinishOutcome::Succeeded { result: None };
    finish(store, a1, 3, ok(), later).await.unwrap();
    assert_eq!(first_of(store, "s", "a").await, None);
    assert_eq!(
        claim_ids(store, "s", later).await,
        [a3],
        "the higher priority"
    );
    finish(store, a3, 1, ok(), later).await.unwrap();
    assert_eq!(claim_ids(store, "s", later).await, [a2]);
    // A dead task deleted lets the next one go.
    finish(store, a2, 1, failed(false), later).await.unwrap();
    let a4 = insert(store, task("k").queue("s").key("a"), later).await.id;
    assert!(claim_ids(store, "s", later).await.is_empty());
    store.task_delete(a2).await.unwrap();
    assert_eq!(claim_ids(store, "s", later).await, [a4]);

    // Back to the order by priority: a task waiting to retry no longer holds its key.
    finish(store, a4, 1, failed(true), later).await.unwrap();
    let a5 = insert(store, task("k").queue("s").key("a"), later).await.id;
    assert!(claim_ids(store, "s", later).await.is_empty());
    let q = order(store, "s", Some(1), KeyOrder::Priority)
        .await
        .unwrap();
    assert_eq!(q.key_order, KeyOrder::Priority);
    assert_eq!(claim_ids(store, "s", later).await, [a5]);
}

async fn per_key_change(store: &Shared, queue: &str, n: Option<u32>) -> Result<QueueInfo> {
    store
        .queue_update(QueueUpdateParams {
            name: queue.into(),
            per_key: Some(n),
            ..Default::default()
        })
        .await
}
