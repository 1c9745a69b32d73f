//! Tasks that wait for tasks: a child waits until every parent succeeded, whatever way each
//! parent ends, and a failed parent cancels what waits for it or lets it run.

use sked_core::{ParentFailure, Task, TaskId, TaskState};

use super::*;

async fn get(store: &Shared, id: TaskId) -> Task {
    store.task_get(id).await.unwrap()
}

/// Claims `id` alone (it must be the only claimable task) and returns its attempt.
async fn run(store: &Shared, id: TaskId, now: Timestamp) -> i32 {
    let claimed = claim(store, 10, now).await;
    let ids: Vec<TaskId> = claimed.iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![id], "only {id} is claimable");
    claimed[0].attempt
}

async fn succeed(store: &Shared, id: TaskId, now: Timestamp) {
    let attempt = run(store, id, now).await;
    let done = finish(
        store,
        id,
        attempt,
        FinishOutcome::Succeeded { result: None },
        now,
    )
    .await
    .unwrap();
    assert_eq!(done.state, TaskState::Succeeded);
}

pub async fn a_child_waits_until_every_parent_succeeded(store: &Shared) {
    let a = insert(store, task("a"), t0()).await.id;
    let b = insert(store, task("b").queue("other"), t0()).await.id;
    let c = insert(store, task("c").after([a, b]), t0()).await;
    assert_eq!(c.state, TaskState::Waiting);
    let c = c.id;
    let waiting = get(store, c).await;
    assert_eq!(waiting.depends_on, vec![a, b]);
    assert_eq!(waiting.waiting_for, vec![a, b]);
    assert_eq!(get(store, a).await.dependents, vec![c]);
    let listed = store
        .task_list(TaskListParams {
            states: vec![TaskState::Waiting],
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(
        listed.items[0].waiting_for,
        vec![a, b],
        "lists say what a task waits for"
    );

    // Claimed one at a time: the child is never among them while it waits.
    let first = claim_from(store, &["default"], 10, at(1)).await;
    assert_eq!(first.iter().map(|t| t.id).collect::<Vec<_>>(), vec![a]);
    finish(
        store,
        a,
        first[0].attempt,
        FinishOutcome::Succeeded { result: None },
        at(2),
    )
    .await
    .unwrap();
    let half = get(store, c).await;
    assert_eq!(half.state, TaskState::Waiting);
    assert_eq!(half.waiting_for, vec![b]);
    assert_eq!(half.depends_on, vec![a, b]);

    // The last parent ends through the brief endings a drain uses.
    let attempt = run(store, b, at(3)).await;
    let ended = store
        .task_finish_many_lean(vec![TaskFinishParams {
            id: b,
            attempt,
            outcome: FinishOutcome::Succeeded { result: None },
            now: at(4),
            jitter: 0.5,
        }])
        .await
        .unwrap();
    assert!(ended[0].is_ok());
    let released = get(store, c).await;
    assert_eq!(released.state, TaskState::Available);
    assert!(released.waiting_for.is_empty());
    assert_eq!(released.depends_on, vec![a, b]);
    succeed(store, c, at(5)).await;

    // A child due later waits for its time once released; moved while it waits, it keeps
    // waiting for its parent.
    let p = insert(store, task("p"), at(10)).await.id;
    let later = insert(store, task("later").after([p]).run_at(at(50)), at(10))
        .await
        .id;
    let moved = store
        .task_reschedule(TaskRescheduleParams {
            id: later,
            run_at: at(100),
            now: at(10),
        })
        .await
        .unwrap();
    assert_eq!((moved.state, moved.run_at), (TaskState::Waiting, at(100)));
    succeed(store, p, at(11)).await;
    assert_eq!(get(store, later).await.state, TaskState::Scheduled);
    assert!(claim(store, 10, at(50)).await.is_empty());
    assert_eq!(claim(store, 10, at(100)).await.len(), 1);

    // Tasks released together each take the state their own run time gives: one due at the
    // release is available, one due a second later is scheduled.
    let q = insert(store, task("q"), at(200)).await.id;
    let made = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![
                task("now").after([q]).run_at(at(300)).into(),
                task("soon").after([q]).run_at(at(301)).into(),
            ],
            now: at(200),
        })
        .await
        .unwrap();
    succeed(store, q, at(300)).await;
    assert_eq!(get(store, made[0].id).await.state, TaskState::Available);
    assert_eq!(get(store, made[1].id).await.state, TaskState::Scheduled);
}

pub async fn a_failed_parent_cancels_what_waits_for_it_or_lets_it_run(store: &Shared) {
    let a = insert(store, task("a").max_attempts(1), t0()).await.id;
    let b = insert(store, task("b").after([a]), t0()).await.id;
    let c = insert(store, task("c").after([b]), t0()).await.id;
    let d = insert(
        store,
        task("d").after([a]).on_parent_failure(ParentFailure::Run),
        t0(),
    )
    .await
    .id;
    assert_eq!(
        get(store, d).await.on_parent_failure,
        ParentFailure::Run,
        "the task says what a failed parent does to it"
    );
    let attempt = run(store, a, at(1)).await;
    let dead = finish(store, a, attempt, failed(true), at(2))
        .await
        .unwrap();
    assert_eq!(dead.state, TaskState::Dead, "out of attempts");
    let b = get(store, b).await;
    assert_eq!(b.state, TaskState::Cancelled);
    assert_eq!(b.last_error, Some(format!("parent {a} ended dead")));
    assert_eq!(b.finished_at, Some(at(2)));
    let c = get(store, c).await;
    assert_eq!(c.state, TaskState::Cancelled, "down the graph");
    assert_eq!(c.last_error, Some(format!("parent {} was cancelled", b.id)));
    assert_eq!(
        get(store, d).await.state,
        TaskState::Available,
        "run anyway"
    );
    succeed(store, d, at(3)).await;
}

pub async fn every_way_a_parent_ends_reaches_its_children(store: &Shared) {
    // Cancelled by hand while it waits for its own parent, and before it started.
    let root = insert(store, task("root").run_at(at(1000)), t0()).await.id;
    let waiting = insert(store, task("p").after([root]), t0()).await.id;
    let child = insert(store, task("c").after([waiting]), t0()).await.id;
    let cancelled = store
        .task_cancel(TaskCancelParams {
            id: waiting,
            now: at(1),
        })
        .await
        .unwrap();
    assert_eq!(cancelled.state, TaskState::Cancelled);
    let c = get(store, child).await;
    assert_eq!(
        (c.state, c.last_error),
        (
            TaskState::Cancelled,
            Some(format!("parent {waiting} was cancelled"))
        )
    );
    store
        .task_cancel(TaskCancelParams {
            id: root,
            now: at(1),
        })
        .await
        .unwrap();

    // Rescued out of attempts.
    let p = insert(store, task("p").max_attempts(1), at(2)).await.id;
    let child = insert(store, task("c").after([p]), at(2)).await.id;
    run(store, p, at(2)).await;
    let rescued = store
        .task_rescue(TaskRescueParams {
            now: at(2)
                .checked_add(TTL)
                .unwrap()
                .checked_add(SignedDuration::from_secs(1))
                .unwrap(),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(rescued, vec![p]);
    assert_eq!(get(store, p).await.state, TaskState::Dead);
    assert_eq!(get(store, child).await.state, TaskState::Cancelled);

    // Cancelled in bulk, the child too: by the bulk action, not by its parent's end.
    let p = insert(store, task("bulk").run_at(at(1000)), at(100))
        .await
        .id;
    let child = insert(store, task("bulk").after([p]), at(100)).await.id;
    let batch = store
        .task_bulk(TaskBulkParams {
            action: BulkAction::Cancel,
            filter: BulkFilter {
                states: vec![TaskState::Waiting, TaskState::Scheduled],
                kind: Some("bulk".into()),
                ..Default::default()
            },
            after: None,
            limit: 100,
            now: at(101),
        })
        .await
        .unwrap();
    assert_eq!(batch.changed, 2);
    let c = get(store, child).await;
    assert_eq!((c.state, c.last_error), (TaskState::Cancelled, None));
    // And a child outside the batch hears of it.
    let p = insert(store, task("bulk2").run_at(at(1000)), at(110))
        .await
        .id;
    let child = insert(store, task("other").after([p]), at(110)).await.id;
    store
        .task_bulk(TaskBulkParams {
            action: BulkAction::Cancel,
            filter: BulkFilter {
                states: vec![TaskState::Scheduled],
                kind: Some("bulk2".into()),
                ..Default::default()
            },
            after: None,
            limit: 100,
            now: at(111),
        })
        .await
        .unwrap();
    let c = get(store, child).await;
    assert_eq!(
        (c.state, c.last_error),
        (
            TaskState::Cancelled,
            Some(format!("parent {p} was cancelled"))
        )
    );

    // Cancelled while running, as its worker acknowledges.
    let p = insert(store, task("p"), at(200)).await.id;
    let child = insert(store, task("c").after([p]), at(200)).await.id;
    let attempt = run(store, p, at(200)).await;
    store
        .task_cancel(TaskCancelParams {
            id: p,
            now: at(201),
        })
        .await
        .unwrap();
    assert_eq!(get(store, child).await.state, TaskState::Waiting);
    finish(store, p, attempt, FinishOutcome::Cancelled, at(202))
        .await
        .unwrap();
    assert_eq!(get(store, child).await.state, TaskState::Cancelled);

    // A retry leaves the children waiting; a later success releases them.
    let p = insert(store, task("p"), at(300)).await.id;
    let child = insert(store, task("c").after([p]), at(300)).await.id;
    let attempt = run(store, p, at(300)).await;
    let retrying = finish(store, p, attempt, failed(true), at(301))
        .await
        .unwrap();
    assert_eq!(retrying.state, TaskState::Retrying);
    assert_eq!(get(store, child).await.state, TaskState::Waiting);
    succeed(store, p, at(10_000)).await;
    assert_eq!(get(store, child).await.state, TaskState::Available);

    // A parent run again by hand counts once: the child, cancelled by hand, stays so.
    let child_task = get(store, child).await;
    assert!(child_task.waiting_for.is_empty());
    store
        .task_cancel(TaskCancelParams {
            id: child,
            now: at(10_001),
        })
        .await
        .unwrap();
    store
        .task_retry(TaskRetryParams {
            id: p,
            now: at(10_002),
        })
        .await
        .unwrap();
    succeed(store, p, at(10_003)).await;
    assert_eq!(get(store, child).await.state, TaskState::Cancelled);
}

pub async fn a_new_task_starts_from_its_parents_states(store: &Shared) {
    let done = insert(store, task("done"), t0()).await.id;
    succeed(store, done, t0()).await;
    let c = insert(store, task("c").after([done]), at(1)).await;
    assert_eq!(
        c.state,
        TaskState::Available,
        "a parent that succeeded counts at once"
    );
    let t = get(store, c.id).await;
    assert_eq!(t.depends_on, vec![done]);
    assert!(t.waiting_for.is_empty());
    succeed(store, c.id, at(1)).await;

    let dead = insert(store, task("dead").max_attempts(1), at(2)).await.id;
    let attempt = run(store, dead, at(2)).await;
    finish(store, dead, attempt, failed(false), at(2))
        .await
        .unwrap();
    let c = insert(store, task("c").after([dead]), at(3)).await;
    assert_eq!(c.state, TaskState::Cancelled);
    let t = get(store, c.id).await;
    assert_eq!(t.last_error, Some(format!("parent {dead} ended dead")));
    assert_eq!(t.finished_at, Some(at(3)));
    let r = insert(
        store,
        task("r")
            .after([dead])
            .on_parent_failure(ParentFailure::Run),
        at(3),
    )
    .await;
    assert_eq!(r.state, TaskState::Available);
    succeed(store, r.id, at(3)).await;

    // An unknown parent is refused, and nothing of the call is made.
    let before = store
        .task_list(TaskListParams {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .len();
    let err = store
        .task_insert_many(TaskInsertParams {
            tasks: vec![task("ok").into(), task("x").after([done, 999_999]).into()],
            now: at(4),
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string().contains("depends_on: no task 999999"),
        "{err}"
    );
    let after = store
        .task_list(TaskListParams {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(before, after, "nothing was made");

    // Parents made earlier in the same call are found; a held unique key adds no edge.
    let p = insert(store, task("p").run_at(at(1000)), at(5)).await.id;
    let first = insert(store, task("u").unique_key("u1").after([p]), at(5)).await;
    assert_eq!(first.state, TaskState::Waiting);
    let other = insert(store, task("o").run_at(at(1000)), at(5)).await.id;
    let again = insert(store, task("u").unique_key("u1").after([other]), at(5)).await;
    assert!(again.duplicate, "a waiting task holds its unique key");
    assert_eq!(again.id, first.id);
    assert!(get(store, other).await.dependents.is_empty());

    // Enqueued together, alike but for their parents, each task starts from its own.
    let batch = insert_batch(
        store,
        &[
            task("same"),
            task("same").after([done]),
            task("same").after([p]),
            task("same").after([dead]),
            task("same").after([p, done]),
            task("same").unique_key("u2").after([p]),
            task("same"),
        ],
        at(6),
    )
    .await;
    let states: Vec<TaskState> = batch.iter().map(|t| t.state).collect();
    use TaskState::*;
    assert_eq!(
        states,
        vec![
            Available, Available, Waiting, Cancelled, Waiting, Waiting, Available
        ]
    );
    for (t, answered) in batch.iter().zip(&states) {
        assert_eq!(
            get(store, t.id).await.state,
            *answered,
            "stored as answered"
        );
    }
    assert_eq!(get(store, batch[4].id).await.waiting_for, vec![p]);
    assert_eq!(
        get(store, batch[4].id).await.depends_on,
        vec![done.min(p), done.max(p)]
    );
    let mut children = get(store, p).await.dependents;
    children.retain(|c| *c != first.id);
    assert_eq!(children, vec![batch[2].id, batch[4].id, batch[5].id]);
}

pub async fn parents_ending_at_once_release_their_child_once(store: &Shared) {
    const PARENTS: usize = 40;
    let parents: Vec<TaskId> = insert_batch(store, &vec![task("p"); PARENTS], t0())
        .await
        .into_iter()
        .map(|t| t.id)
        .collect();
    let child = insert(store, task("child").after(parents.clone()), t0())
        .await
        .id;
    let claimed = claim(store, PARENTS as u32, at(1)).await;
    assert_eq!(claimed.len(), PARENTS);
    let mut ends = Vec::new();
    for t in claimed {
        let store = store.clone();
        ends.push(tokio::spawn(async move {
            finish(
                &store,
                t.id,
                t.attempt,
                FinishOutcome::Succeeded { result: None },
                at(2),
            )
            .await
            .unwrap();
        }));
    }
    // Children enqueued while the parents end: each finds them ended, or is counted down.
    let mut late = Vec::new();
    for i in 0..10 {
        let store = store.clone();
        let parents = parents.clone();
        late.push(tokio::spawn(async move {
            let one = parents[i * 3];
            insert(&store, task("late").after([one]), at(2)).await.id
        }));
    }
    for e in ends {
        e.await.unwrap();
    }
    let mut lates = Vec::new();
    for l in late {
        lates.push(l.await.unwrap());
    }
    let c = get(store, child).await;
    assert_eq!(c.state, TaskState::Available, "the last parent released it");
    assert!(c.waiting_for.is_empty());
    for id in lates {
        assert_eq!(
            get(store, id).await.state,
            TaskState::Available,
            "a child enqueued as its parent ended does not wait forever"
        );
    }
}

pub async fn a_parent_run_again_by_hand_counts_once(store: &Shared) {
    // `c` runs whatever way `a` ends, and waits for `b` too.
    let a = insert(store, task("a").max_attempts(1), t0()).await.id;
    let b = insert(store, task("b").run_at(at(1000)), t0()).await.id;
    let c = insert(
        store,
        task("c")
            .after([a, b])
            .on_parent_failure(ParentFailure::Run),
        t0(),
    )
    .await
    .id;
    let attempt = run(store, a, at(1)).await;
    finish(store, a, attempt, failed(true), at(2))
        .await
        .unwrap();
    let waits = get(store, c).await;
    assert_eq!(
        (waits.state, waits.waiting_for),
        (TaskState::Waiting, vec![b])
    );
    store
        .task_retry(TaskRetryParams { id: a, now: at(3) })
        .await
        .unwrap();
    assert_eq!(
        get(store, c).await.waiting_for,
        vec![b],
        "the child has counted the end of its parent run again"
    );
    succeed(store, a, at(4)).await;
    let waits = get(store, c).await;
    assert_eq!(
        (waits.state, waits.waiting_for),
        (TaskState::Waiting, vec![b]),
        "the second end of a parent does not count again"
    );
    succeed(store, b, at(1000)).await;
    assert_eq!(get(store, c).await.state, TaskState::Available);
}

/// One random step among `ids`: a finished task retried by hand, a task not started cancelled
/// by hand (both noted in `by_hand`), or else up to `claims.0` tasks claimed and ended, each a
/// success with a chance of `claims.1` percent and a retryable failure otherwise.
async fn random_step(
    store: &Shared,
    rng: &mut Rng,
    ids: &[TaskId],
    by_hand: &mut std::collections::BTreeSet<TaskId>,
    claims: (u32, u64),
    now: Timestamp,
) {
    let id = ids[rng.below(ids.len() as u64) as usize];
    let state = get(store, id).await.state;
    match rng.below(10) {
        0 if state.is_finished() => {
            store.task_retry(TaskRetryParams { id, now }).await.unwrap();
            by_hand.insert(id);
        }
        1 if !state.is_finished() && state != TaskState::Running => {
            store
                .task_cancel(TaskCancelParams { id, now })
                .await
                .unwrap();
            by_hand.insert(id);
        }
        _ => {
            for t in claim(store, claims.0, now).await {
                let outcome = match rng.chance(claims.1) {
                    true => FinishOutcome::Succeeded { result: None },
                    false => failed(true),
                };
                finish(store, t.id, t.attempt, outcome, now).await.unwrap();
            }
        }
    }
}

/// The reference for the count of parents a waiting task keeps: on random graphs whose tasks
/// end every way (successes, failures with and without attempts left, cancels and retries by
/// hand), after each step a task waits exactly while a parent of its is left uncounted, as its
/// edges and its parents' states say (`waiting_for`). Tasks cancelled, by hand or by a failed
/// parent, and those retried by hand are left out: they no longer wait whatever their parents.
pub async fn a_task_waits_exactly_while_a_parent_is_uncounted(store: &Shared) {
    for seed in 1..=3u64 {
        let mut rng = Rng(seed);
        let kind = format!("g{seed}");
        let base = at(seed as i64 * 1_000_000);
        let mut ids: Vec<TaskId> = Vec::new();
        for _ in 0..24 {
            let mut t = task(&kind).max_attempts(1 + rng.below(2) as i32);
            if !ids.is_empty() {
                let parents: std::collections::BTreeSet<TaskId> = (0..rng.below(4))
                    .map(|_| ids[rng.below(ids.len() as u64) as usize])
                    .collect();
                t = t.after(parents);
                if rng.chance(50) {
                    t = t.on_parent_failure(ParentFailure::Run);
                }
            }
            ids.push(insert(store, t, base).await.id);
        }
        let mut by_hand = std::collections::BTreeSet::new();
        for step in 0..60 {
            let now = base.checked_add(SignedDuration::from_hours(step)).unwrap();
            random_step(store, &mut rng, &ids, &mut by_hand, (3, 60), now).await;
            for id in &ids {
                let t = get(store, *id).await;
                if by_hand.contains(id) || t.state == TaskState::Cancelled {
                    continue;
                }
                assert_eq!(
                    t.state == TaskState::Waiting,
                    !t.waiting_for.is_empty(),
                    "seed {seed}, step {step}: task {id} is {:?} waiting for {:?}",
                    t.state,
                    t.waiting_for
                );
            }
        }
    }
}

/// A random workflow of stages (tasks made together with the same parents), tasks that wait
/// for whole stages (alone or with another parent, or for two stages) and tasks with parents
/// picked at random. The reference is the graph as given: after each step of ends every way
/// (successes, failures with and without attempts left, cancels and retries by hand), each
/// task's parents, children and names in the workflow's graph are those given; and a task
/// not cancelled and not touched by hand waits exactly for its parents that have never ended,
/// whatever tasks share its count.
pub async fn stages_wait_as_their_tasks_would_alone(store: &Shared) {
    for seed in 1..=4u64 {
        let mut rng = Rng(seed * 7919);
        let kind = format!("s{seed}");
        let base = at(seed as i64 * 1_000_000);
        // Each task: the indices of its parents; and the stages made so far.
        let mut after: Vec<Vec<usize>> = vec![Vec::new()];
        let mut stages: Vec<Vec<usize>> = Vec::new();
        let mut rules: Vec<ParentFailure> = vec![ParentFailure::Cancel];
        while after.len() < 40 {
            let n = after.len();
            let pick = |rng: &mut Rng| rng.below(n as u64) as usize;
            let stage_of = |rng: &mut Rng, stages: &Vec<Vec<usize>>| {
                stages[rng.below(stages.len() as u64) as usize].clone()
            };
            let (size, parents) = match rng.below(5) {
                0 | 1 => {
                    let parents = match stages.is_empty() || rng.chance(50) {
                        true => vec![pick(&mut rng)],
                        false => stage_of(&mut rng, &stages),
                    };
                    (2 + rng.below(4) as usize, parents)
                }
                2 if !stages.is_empty() => {
                    let mut parents = stage_of(&mut rng, &stages);
                    if rng.chance(40) {
                        parents.push(pick(&mut rng));
                    }
                    if rng.chance(30) {
                        parents.extend(stage_of(&mut rng, &stages));
                    }
                    (1, parents)
                }
                _ => (1, (0..1 + rng.below(3)).map(|_| pick(&mut rng)).collect()),
            };
            let mut parents = parents;
            parents.sort_unstable();
            parents.dedup();
            let rule = match rng.chance(50) {
                true => ParentFailure::Run,
                false => ParentFailure::Cancel,
            };
            if size > 1 {
                stages.push((n..n + size).collect());
            }
            for _ in 0..size {
                after.push(parents.clone());
                rules.push(rule);
            }
        }
        let made = store
            .workflow_create(WorkflowCreateParams {
                name: Some(kind.clone()),
                tasks: (after.iter().zip(&rules).enumerate())
                    .map(|(i, (a, rule))| WorkflowTaskInsert {
                        name: format!("n{i}"),
                        after: a.clone(),
                        insert: task(&kind)
                            .max_attempts(1 + rng.below(2) as i32)
                            .on_parent_failure(*rule)
                            .into(),
                    })
                    .collect(),
                schedule: None,
                nominal_at: None,
                now: base,
            })
            .await
            .unwrap();
        let ids = made.tasks.clone();
        let parents_of =
            |i: usize| -> Vec<TaskId> { after[i].iter().map(|p| ids[*p]).collect::<Vec<_>>() };
        let mut children: Vec<Vec<TaskId>> = vec![Vec::new(); ids.len()];
        for (i, a) in after.iter().enumerate() {
            for p in a {
                children[*p].push(ids[i]);
            }
        }
        let mut ended_once = std::collections::BTreeSet::new();
        let mut by_hand = std::collections::BTreeSet::new();
        for step in 0..80 {
            let now = base.checked_add(SignedDuration::from_hours(step)).unwrap();
            random_step(store, &mut rng, &ids, &mut by_hand, (4, 65), now).await;
            let tasks: Vec<Task> = {
                let mut tasks = Vec::with_capacity(ids.len());
                for id in &ids {
                    tasks.push(get(store, *id).await);
                }
                tasks
            };
            for t in &tasks {
                if t.state.is_finished() {
                    ended_once.insert(t.id);
                }
            }
            for (i, t) in tasks.iter().enumerate() {
                let at = format!("seed {seed}, step {step}, task n{i} ({})", t.id);
                assert_eq!(t.depends_on, parents_of(i), "{at}: parents");
                assert_eq!(t.dependents, children[i], "{at}: children");
                assert_eq!(t.on_parent_failure, rules[i], "{at}: rule");
                if by_hand.contains(&t.id) || t.state == TaskState::Cancelled {
                    continue;
                }
                let left: Vec<TaskId> = (parents_of(i).into_iter())
                    .filter(|p| !ended_once.contains(p))
                    .collect();
                assert_eq!(
                    t.state == TaskState::Waiting,
                    !left.is_empty(),
                    "{at} is {:?} with parents never ended {left:?}",
                    t.state
                );
                if t.state == TaskState::Waiting {
                    assert_eq!(t.waiting_for, left, "{at}: waiting for");
                }
            }
            if step % 20 == 0 {
                let graph = store
                    .workflow_tasks(WorkflowTasksParams {
                        id: made.id,
                        after_id: None,
                        limit: 1000,
                    })
                    .await
                    .unwrap();
                for (i, node) in graph.items.iter().enumerate() {
                    let names: Vec<String> = after[i].iter().map(|p| format!("n{p}")).collect();
                    assert_eq!(node.after, names, "seed {seed}: n{i}'s names in the graph");
                }
            }
        }
    }
}
