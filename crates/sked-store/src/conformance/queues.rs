//! Queue counts, rate limits and leases.

use sked_core::TaskState;

use crate::*;

use super::*;

/// An update that must find its queue refuses a name with neither settings nor tasks and
/// creates nothing; it finds a queue that has only tasks, or only settings. Removing takes a
/// queue's settings when no task is in it, and refuses while one is, whatever its state.
pub async fn a_mistyped_queue_is_refused_and_a_queue_without_tasks_is_removed(store: &Shared) {
    let pause = |name: &str, must_exist: bool| {
        store.queue_update(QueueUpdateParams {
            name: name.into(),
            paused: Some(true),
            must_exist,
            ..Default::default()
        })
    };
    let names = async || -> Vec<String> {
        let page = store
            .queue_list(QueueListParams {
                after: None,
                limit: 100,
                count_limit: QUEUE_COUNT_LIMIT,
                now: t0(),
            })
            .await
            .unwrap();
        page.items.into_iter().map(|q| q.name).collect()
    };
    let e = pause("nosuchqueue", true).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("nosuchqueue"), "{e}");
    assert!(names().await.is_empty(), "nothing created");
    let e = store.queue_remove("nosuchqueue").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    // A queue with only a finished task is a queue; so is one with only settings.
    let mut t = task("k");
    t.queue = "mail".into();
    let id = insert(store, t, t0()).await.id;
    store
        .task_cancel(TaskCancelParams { id, now: t0() })
        .await
        .unwrap();
    assert!(pause("mail", true).await.unwrap().paused);
    assert!(pause("later", false).await.unwrap().paused);
    assert!(pause("later", true).await.unwrap().paused);
    assert_eq!(names().await, ["later", "mail"]);

    // Removing: refused while a task is in the queue (settings kept), done when none is.
    let e = store.queue_remove("mail").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(store.queue_get("mail", t0()).await.unwrap().paused);
    store.queue_remove("later").await.unwrap();
    assert_eq!(names().await, ["mail"]);
    let e = pause("later", true).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = store.queue_get("later", t0()).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::NotFound,
        "a removed queue is gone: {e}"
    );
    let e = store.queue_get("nosuchqueue", t0()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = store.queue_remove("bad name!").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
}

pub async fn queue_counts(store: &Shared) {
    for _ in 0..3 {
        insert(store, task("k"), t0()).await;
    }
    claim(store, 1, t0()).await;
    // Queues before and after "default" in order, each found through another index: "a" has
    // only a finished task, "zz" only a future one, "idle" nothing but settings.
    for queue in ["a", "mail", "mail", "zz"] {
        let mut t = task("k");
        t.queue = queue.into();
        if queue == "zz" {
            t.run_at = Some(at(60));
        }
        let id = insert(store, t, t0()).await.id;
        if queue == "a" {
            store
                .task_cancel(TaskCancelParams { id, now: t0() })
                .await
                .unwrap();
        }
    }
    store
        .queue_update(QueueUpdateParams {
            name: "idle".into(),
            paused: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    let list = |after: Option<&str>, limit: u32, count_limit: u64| {
        store.queue_list(QueueListParams {
            after: after.map(str::to_string),
            limit,
            count_limit,
            now: t0(),
        })
    };
    let page = list(None, 100, QUEUE_COUNT_LIMIT).await.unwrap();
    assert!(!page.more);
    let queues = page.items;
    let names: Vec<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["a", "default", "idle", "mail", "zz"]);
    // Pages by name: queues with tasks and queues with settings only, each once.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = list(after.as_deref(), 2, QUEUE_COUNT_LIMIT).await.unwrap();
        assert!(page.items.len() <= 2);
        paged.extend(page.items.iter().cloned());
        after = page.next_after();
        if after.is_none() {
            break;
        }
    }
    assert_eq!(paged, queues, "pages of two give the same queues");
    let last = list(Some("mail"), 2, QUEUE_COUNT_LIMIT).await.unwrap();
    assert_eq!((last.items.len(), last.more), (1, false));
    let q = queues.iter().find(|q| q.name == "default").unwrap();
    assert_eq!(q.counts.get(&TaskState::Available), Some(&2));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    assert_eq!(q.counts.len(), 2, "states with no task are left out");
    assert!(q.counts_at_least.is_empty());
    let only = |name: &str| {
        queues
            .iter()
            .find(|q| q.name == name)
            .unwrap()
            .counts
            .clone()
    };
    assert_eq!(only("a"), [(TaskState::Cancelled, 1)].into());
    assert_eq!(only("zz"), [(TaskState::Scheduled, 1)].into());
    assert_eq!(only("mail"), [(TaskState::Available, 2)].into());
    let idle = queues.iter().find(|q| q.name == "idle").unwrap();
    assert!(idle.paused && idle.counts.is_empty());
    // Counting stops at the limit and says so; below it, counts are exact.
    let queues = list(None, 100, 1).await.unwrap().items;
    let q = queues.iter().find(|q| q.name == "default").unwrap();
    assert_eq!(q.counts.get(&TaskState::Available), Some(&1));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    assert_eq!(
        q.counts_at_least.iter().copied().collect::<Vec<_>>(),
        [TaskState::Available]
    );
    let mail = queues.iter().find(|q| q.name == "mail").unwrap();
    assert_eq!(mail.counts.get(&TaskState::Available), Some(&1));
    assert!(mail.counts_at_least.contains(&TaskState::Available));
    let a = queues.iter().find(|q| q.name == "a").unwrap();
    assert!(a.counts_at_least.is_empty(), "one task, limit one: exact");
    // A queue's settings change answers with its counts too.
    let q = store
        .queue_update(QueueUpdateParams {
            name: "default".into(),
            concurrency_limit: Some(Some(5)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.concurrency_limit, Some(5));
    assert_eq!(q.counts.get(&TaskState::Available), Some(&2));
    assert_eq!(q.counts.get(&TaskState::Running), Some(&1));
    let err = store
        .queue_update(QueueUpdateParams {
            name: "".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
}

pub async fn leases_renew_and_take_over(store: &Shared) {
    let acquire = |holder: &str, now| {
        store.lease_acquire(LeaseAcquireParams {
            name: "leader".into(),
            holder: holder.into(),
            ttl: TTL,
            now,
        })
    };
    let a = acquire("a", t0()).await.unwrap().expect("free lease");
    assert!(acquire("b", at(10)).await.unwrap().is_none(), "held by a");
    let renewed = acquire("a", at(20)).await.unwrap().unwrap();
    assert_eq!(renewed.token, a.token, "renewal keeps the token");
    assert_eq!(renewed.expires_at, at(50));
    let b = acquire("b", at(51))
        .await
        .unwrap()
        .expect("expired lease is taken over");
    assert!(b.token > a.token, "a takeover gets a new fencing token");
    assert!(acquire("a", at(52)).await.unwrap().is_none());
    assert_eq!(
        store
            .lease_get("leader", at(52))
            .await
            .unwrap()
            .unwrap()
            .holder,
        "b"
    );
    store.lease_release("leader", "b").await.unwrap();
    assert!(store.lease_get("leader", at(53)).await.unwrap().is_none());
    let a2 = acquire("a", at(53)).await.unwrap().unwrap();
    assert!(a2.token > b.token);
}

pub async fn rate_limit_caps_starts_per_window(store: &Shared) {
    let rate: sked_core::RateLimit = "3/10s".parse().unwrap();
    for _ in 0..10 {
        let mut t = task("k");
        t.queue = "rated".into();
        insert(store, t, t0()).await;
    }
    insert(store, task("k"), t0()).await;
    let q = store
        .queue_update(QueueUpdateParams {
            name: "rated".into(),
            rate: Some(Some(rate)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.rate, Some(rate));
    assert_eq!(q.concurrency_limit, None);
    assert_eq!(queue_at(store, "rated", t0()).await.rate, Some(rate));

    let first = claim(store, 10, t0()).await;
    let of = |tasks: &[sked_core::Task]| tasks.iter().filter(|t| t.queue == "rated").count();
    assert_eq!(of(&first), 3, "three starts in the window");
    assert_eq!(first.len(), 4, "the unlimited queue is not held back");
    // Finishing does not give a start back: the window counts starts, not running tasks.
    for t in &first {
        let done = FinishOutcome::Succeeded { result: None };
        finish(store, t.id, t.attempt, done, at(1)).await.unwrap();
    }
    assert!(
        claim(store, 10, at(5)).await.is_empty(),
        "the window is full"
    );
    assert_eq!(
        store.task_held_until(at(5)),
        Some(at(10)),
        "held until the first starts leave the window"
    );
    // Lists say so too, with the window's starts.
    let rated = queue_at(store, "rated", at(5)).await;
    assert_eq!(rated.rate_window, Some(3));
    let held = Held {
        by: HeldBy::Rate,
        until: Some(at(10)),
        behind: None,
    };
    assert_eq!(rated.held, Some(held));
    // A change's answer says so too, taken at the instant given.
    let changed = store
        .queue_update(QueueUpdateParams {
            name: "rated".into(),
            concurrency_limit: Some(Some(100)),
            now: Some(at(5)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((changed.rate_window, changed.held), (Some(3), Some(held)));
    let later = queue_at(store, "rated", at(10)).await;
    assert_eq!((later.rate_window, later.held), (Some(0), None));
    assert!(claim_from(store, &["rated"], 10, at(9)).await.is_empty());
    // The window slides: the starts at t0 no longer count at t0 + 10 s.
    assert_eq!(of(&claim(store, 10, at(10)).await), 3);
    assert!(claim_from(store, &["rated"], 10, at(19)).await.is_empty());
    // Taken a few at a time, still three per window.
    assert_eq!(claim(store, 1, at(20)).await.len(), 1);
    assert_eq!(claim(store, 10, at(20)).await.len(), 2);
    assert!(claim(store, 10, at(21)).await.is_empty());
    // Removed: the last one starts at once.
    let q = store
        .queue_update(QueueUpdateParams {
            name: "rated".into(),
            rate: Some(None),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.rate, None);
    assert_eq!(claim(store, 10, at(21)).await.len(), 1);
    // Its starts went with it: set again, the window starts empty.
    let again = store
        .queue_update(QueueUpdateParams {
            name: "rated".into(),
            rate: Some(Some(rate)),
            now: Some(at(21)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((again.rate_window, again.held), (Some(0), None));
}

pub async fn rate_and_concurrency_limits_hold_together(store: &Shared) {
    for _ in 0..5 {
        let mut t = task("k");
        t.queue = "both".into();
        insert(store, t, t0()).await;
    }
    store
        .queue_update(QueueUpdateParams {
            name: "both".into(),
            concurrency_limit: Some(Some(2)),
            rate: Some(Some("3/1m".parse().unwrap())),
            ..Default::default()
        })
        .await
        .unwrap();
    let first = claim(store, 10, t0()).await;
    assert_eq!(first.len(), 2, "two at once");
    let held = queue_at(store, "both", t0()).await.held;
    assert_eq!(held.map(|h| h.by), Some(HeldBy::Concurrency));
    let done = FinishOutcome::Succeeded { result: None };
    finish(store, first[0].id, first[0].attempt, done, at(1))
        .await
        .unwrap();
    let second = claim(store, 10, at(2)).await;
    assert_eq!(
        second.len(),
        1,
        "one slot freed, one start left in the window"
    );
    let done = FinishOutcome::Succeeded { result: None };
    finish(store, second[0].id, second[0].attempt, done, at(3))
        .await
        .unwrap();
    assert!(
        claim(store, 10, at(4)).await.is_empty(),
        "a slot is free but the window is full"
    );
    assert_eq!(
        claim(store, 10, at(60)).await.len(),
        1,
        "one slot free again"
    );
}

pub async fn a_rate_burst_adds_to_one_window_not_to_the_rate(store: &Shared) {
    for _ in 0..100 {
        let mut t = task("k");
        t.queue = "bursty".into();
        insert(store, t, t0()).await;
    }
    let rate: sked_core::RateLimit = "10/s burst 5".parse().unwrap();
    let q = store
        .queue_update(QueueUpdateParams {
            name: "bursty".into(),
            rate: Some(Some(rate)),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(q.rate, Some(rate));
    let ms = |n: i64| t0() + SignedDuration::from_millis(n);
    // Quiet until now: the limit and the burst at once.
    assert_eq!(claim(store, 100, t0()).await.len(), 15);
    assert!(claim(store, 100, ms(500)).await.is_empty());
    assert_eq!(store.task_held_until(ms(500)), Some(ms(1_000)));
    // Claims every tenth of a second for four seconds: no window of a second holds more than
    // the limit and the burst, and the bucket keeps the long run to ten a second.
    let mut starts = vec![(0, 15)];
    for step in 6..=40 {
        let n = claim(store, 100, ms(step * 100)).await.len() as i64;
        if n > 0 {
            starts.push((step * 100, n));
        }
    }
    for (end, _) in &starts {
        let window: i64 = starts
            .iter()
            .filter(|(at, _)| at > &(end - 1_000) && at <= end)
            .map(|(_, n)| n)
            .sum();
        assert!(
            window <= 15,
            "{window} starts in the second up to {end} ms: {starts:?}"
        );
    }
    let total: i64 = starts.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 15 + 40, "{starts:?}");
    // A quiet spell refills the burst.
    assert_eq!(claim(store, 100, ms(10_000)).await.len(), 15);
    assert_eq!(queue_at(store, "bursty", t0()).await.rate, Some(rate));
}

/// Claims at once (on as many connections as the store has) take no more than the limits
/// allow together: each claim must count what the others committed before it.
pub async fn limits_hold_for_claims_at_once(store: &Shared) {
    for _ in 0..60 {
        let mut t = task("k");
        t.queue = "contended".into();
        insert(store, t, t0()).await;
    }
    let limit = |concurrency, rate: &str| QueueUpdateParams {
        name: "contended".into(),
        concurrency_limit: Some(concurrency),
        rate: Some(Some(rate.parse().unwrap())),
        ..Default::default()
    };
    let at_once = |now: Timestamp| {
        let claims: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { claim_from(&store, &["contended"], 10, now).await.len() })
            })
            .collect();
        async move {
            let mut total = 0;
            for c in claims {
                total += c.await.unwrap();
            }
            total
        }
    };
    store.queue_update(limit(Some(5), "100/1m")).await.unwrap();
    assert_eq!(at_once(t0()).await, 5, "the concurrency limit");
    store.queue_update(limit(None, "7/1m")).await.unwrap();
    assert_eq!(at_once(at(1)).await, 2, "the rest of the rate window");
    assert_eq!(at_once(at(61)).await, 7, "the next window");
}

/// Claims over every queue at once, while a queue limited by its rate has fewer tasks than
/// its window has room for: together they start what there is, from it and from an open
/// queue, and the window counts only the starts made, so later claims start the rest of it.
pub async fn a_short_rated_claim_counts_only_its_starts(store: &Shared) {
    let add = |queue: &'static str, n: usize| async move {
        for _ in 0..n {
            let mut t = task("k");
            t.queue = queue.into();
            insert(store, t, t0()).await;
        }
    };
    store
        .queue_update(QueueUpdateParams {
            name: "short".into(),
            rate: Some(Some("10/1m".parse().unwrap())),
            ..Default::default()
        })
        .await
        .unwrap();
    add("short", 3).await;
    add("open", 2).await;
    let claims: Vec<_> = (0..4)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { claim_from(&store, &[], 10, t0()).await })
        })
        .collect();
    let mut started = Vec::new();
    for c in claims {
        started.extend(c.await.unwrap().into_iter().map(|t| t.queue));
    }
    started.sort();
    assert_eq!(started, ["open", "open", "short", "short", "short"]);
    assert_eq!(queue_at(store, "short", at(1)).await.rate_window, Some(3));
    add("short", 10).await;
    add("open", 1).await;
    let later = claim_from(store, &[], 20, at(1)).await;
    let from = |queue: &str| later.iter().filter(|t| t.queue == queue).count();
    assert_eq!(
        (from("short"), from("open")),
        (7, 1),
        "the rest of the window, and the open task"
    );
    assert_eq!(queue_at(store, "short", at(1)).await.rate_window, Some(10));
}

/// The queue `name` as a list at `now` shows it.
async fn queue_at(store: &Shared, name: &str, now: Timestamp) -> QueueInfo {
    let listed = store
        .queue_list(QueueListParams {
            after: None,
            limit: 100,
            count_limit: QUEUE_COUNT_LIMIT,
            now,
        })
        .await
        .unwrap();
    listed.items.into_iter().find(|q| q.name == name).unwrap()
}
