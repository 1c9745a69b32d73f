//! `sked_enqueue` and `sked_enqueue_many`, the SQL functions any language calls inside its own
//! transaction: they refuse what the API refuses (checked against `NewTask::validate`, the
//! reference, case by case), store what `enqueue_in` stores, keep unique keys and debounce as
//! the store does, and a task exists and is announced only when the caller's transaction
//! commits.

use std::time::Duration;

use jiff::SignedDuration;
use serde_json::{Value, json};
use sked_core::{NewTask, check_builtin_payload};
use sked_postgres::testing::{TestSchema, database_url};
use sked_store::{Store, StoreEvent};

use crate::transactional::{announced, tasks};

/// A connection of the application's, on `schema`'s search path.
async fn app(schema: &TestSchema) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&crate::schema_url(schema), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// A duration as PostgreSQL reads an interval: whole milliseconds.
fn interval(d: Option<SignedDuration>) -> Option<String> {
    d.map(|d| format!("{} milliseconds", d.as_millis()))
}

/// `sked_enqueue` called with every field of `t`, by name; the id or the error's message.
async fn sql_enqueue(c: &impl tokio_postgres::GenericClient, t: &NewTask) -> Result<i64, String> {
    let sql = "SELECT sked_enqueue(kind => $1, payload => $2, queue => $3, priority => $4, \
               run_at => $5, max_attempts => $6, timeout => $7::text::interval, \
               unique_key => $8, unique_for => $9::text::interval, \
               debounce => $10::text::interval, key => $11, \
               backoff_base => $12::text::interval, backoff_max => $13::text::interval, \
               traceparent => $14, depends_on => $15, on_parent_failure => $16, batch => $17, \
               expires_at => $18, ttl => $19::text::interval)";
    let parents: Option<&Vec<i64>> = (!t.depends_on.is_empty()).then_some(&t.depends_on);
    let then = t.on_parent_failure.as_str();
    // SQL takes the exponential shape alone, as its base and max.
    let (base, max) = match t.backoff {
        Some(sked_core::Backoff::Exponential { base, max }) => (Some(base), Some(max)),
        _ => (None, None),
    };
    let row = c
        .query_one(
            sql,
            &[
                &t.kind,
                &t.payload,
                &t.queue,
                &t.priority,
                &t.run_at,
                &t.max_attempts,
                &interval(t.timeout),
                &t.unique_key,
                &interval(t.unique_for),
                &interval(t.debounce),
                &t.key,
                &interval(base),
                &interval(max),
                &t.traceparent,
                &parents,
                &then,
                &t.batch,
                &t.expires_at,
                &interval(t.ttl),
            ],
        )
        .await;
    match row {
        Ok(row) => Ok(row.get(0)),
        Err(e) => {
            let db = e.as_db_error().unwrap_or_else(|| panic!("{e:?}"));
            assert_eq!(db.code().code(), "22023", "{}", db.message());
            Err(db.message().to_string())
        }
    }
}

/// `text` without what it quotes.
fn unquoted(text: &str) -> String {
    text.split('"').step_by(2).collect::<Vec<_>>().join("\"…\"")
}

/// What the API refuses, and some of what it takes: each case goes to the reference
/// (`NewTask::validate`) and to `sked_enqueue`, which must agree, word for word where the
/// reference's words are sked's own (serde's and the sizes' are not).
#[tokio::test]
async fn sql_enqueue_refuses_what_the_api_refuses() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let _store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let mut c = app(&schema).await;
    let k = || NewTask::new("k");
    let secs = SignedDuration::from_secs;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let cases: Vec<NewTask> = vec![
        k(),
        NewTask::new(""),
        NewTask::new("a b"),
        NewTask::new("a/b"),
        NewTask::new("x".repeat(128)),
        NewTask::new("x".repeat(129)),
        NewTask::new("naïve.kind"),
        NewTask::new("no\u{a0}break"),
        NewTask::new("line\u{2028}sep"),
        NewTask::new("bell\u{7}"),
        k().queue(""),
        k().queue("bad queue"),
        k().queue("mail"),
        k().max_attempts(0),
        k().max_attempts(-1),
        k().max_attempts(1),
        k().timeout(SignedDuration::ZERO),
        k().timeout(secs(-5)),
        k().timeout(secs(3651 * 86_400)),
        k().timeout(secs(30)),
        k().unique_key(""),
        k().unique_key("u".repeat(513)),
        k().unique_key("u".repeat(512)),
        k().key(""),
        k().key("tenant-1"),
        k().traceparent("nonsense"),
        k().traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        k().traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
        k().traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
        k().traceparent(tp),
        k().unique_for(secs(10)),
        k().unique_key("w").unique_for(SignedDuration::ZERO),
        k().unique_key("w").unique_for(secs(10)).debounce(secs(1)),
        k().debounce(secs(1)),
        k().unique_key("d").debounce(secs(-1)),
        k().backoff(SignedDuration::ZERO, secs(10)),
        k().backoff(secs(10), secs(5)),
        k().backoff(secs(10), secs(3651 * 86_400)),
        k().backoff(secs(1), secs(60)),
        k().priority(-5),
        k().after([0]),
        k().after([-3]),
        k().after([7, 8, 7]),
        k().unique_key("d").debounce(secs(1)).after([1]),
        k().ttl(secs(30)),
        k().ttl(SignedDuration::ZERO),
        k().ttl(secs(-30)),
        k().ttl(secs(3651 * 86_400)),
        k().ttl(secs(30))
            .expires_at(jiff::Timestamp::now() + secs(3600)),
        k().expires_at(jiff::Timestamp::now() + secs(3600)),
    ];
    for t in &cases {
        let reference = t.validate();
        let tx = c.transaction().await.unwrap();
        let sql = sql_enqueue(&tx, t).await;
        tx.rollback().await.unwrap();
        match (&reference, &sql) {
            (Ok(()), Ok(_)) => {}
            // Word for word, but for how a quoted value's odd characters are escaped
            // (Rust's `{:?}`, JSON's).
            (Err(e), Err(said)) => assert_eq!(
                unquoted(said),
                unquoted(&format!("sked: {e}")),
                "{t:?}: {said}"
            ),
            _ => panic!("the API and SQL disagree on {t:?}: {reference:?} against {sql:?}"),
        }
    }

    // A deadline that could never be met: refused, as the store refuses it (the times are
    // written in each one's format).
    let now = jiff::Timestamp::now();
    for t in [
        k().expires_at(now - secs(60)),
        k().run_at(now + secs(3600)).expires_at(now + secs(60)),
    ] {
        assert!(t.deadline(now).is_err());
        let said = sql_enqueue(&c, &t).await.unwrap_err();
        assert!(
            said.starts_with("sked: the task's deadline to start (")
                && said.ends_with("): it could never run"),
            "{said}"
        );
    }

    // A payload over the limit: both refuse (they count its bytes differently).
    let big = k().payload(json!("x".repeat(1024 * 1024)));
    assert!(big.validate().is_err());
    let said = sql_enqueue(&c, &big).await.unwrap_err();
    assert!(said.starts_with("sked: payload is "), "{said}");
}

/// The built-in kinds' payloads: sked-core's check (the reference) and SQL's take and refuse
/// the same ones.
#[tokio::test]
async fn sql_checks_builtin_payloads_as_sked_core_does() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let _store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let c = app(&schema).await;
    let payloads: Vec<(&str, Value)> = vec![
        ("shell", json!({"command": "echo hi"})),
        (
            "shell",
            json!({"argv": ["ls", "-l"], "env": {"A": "1"}, "cwd": "/tmp"}),
        ),
        ("shell", json!({"command": "x", "env": {}, "cwd": null})),
        ("shell", json!({"cmd": "echo"})),
        ("shell", json!({})),
        ("shell", json!({"command": "a", "argv": ["b"]})),
        ("shell", json!({"argv": []})),
        ("shell", json!({"argv": [1]})),
        ("shell", json!({"argv": "ls"})),
        ("shell", json!({"command": 5})),
        ("shell", json!({"command": null, "argv": ["true"]})),
        ("shell", json!({"command": "x", "env": {"A": 1}})),
        ("shell", json!({"command": "x", "env": null})),
        ("shell", json!({"command": "x", "cwd": 3})),
        ("shell", json!("echo")),
        ("shell", json!(null)),
        ("shell", json!([])),
        ("http", json!({"url": "https://example.org/hook"})),
        (
            "http",
            json!({"url": "HTTP://10.0.0.1:8080?x=1", "method": "post", "body": {"a": 1}}),
        ),
        (
            "http",
            json!({"url": "http://h", "headers": {"A": "b"}, "follow_redirects": true}),
        ),
        (
            "http",
            json!({"url": "http://h", "body": null, "method": "PATCH"}),
        ),
        ("http", json!({"uri": "https://x"})),
        ("http", json!({"method": "GET"})),
        ("http", json!({"url": 5})),
        ("http", json!({"url": "ftp://x"})),
        ("http", json!({"url": "https:///path"})),
        ("http", json!({"url": "https://?q"})),
        ("http", json!({"url": "https://x", "method": "GE T"})),
        ("http", json!({"url": "https://x", "method": ""})),
        ("http", json!({"url": "https://x", "method": 1})),
        ("http", json!({"url": "https://x", "headers": {"A": 1}})),
        ("http", json!({"url": "https://x", "headers": []})),
        (
            "http",
            json!({"url": "https://x", "follow_redirects": "yes"}),
        ),
        ("http", json!(null)),
        ("report", json!({"cmd": 1})),
    ];
    for (kind, payload) in payloads {
        let reference = check_builtin_payload(kind, &payload);
        let sql = c
            .query_one(
                "SELECT sked_check_builtin_payload($1, $2)",
                &[&kind, &payload],
            )
            .await;
        assert_eq!(
            reference.is_ok(),
            sql.is_ok(),
            "{kind} {payload}: {reference:?} against {sql:?}"
        );
        if let Err(e) = sql {
            let said = e.as_db_error().unwrap().message().to_string();
            assert!(
                said.starts_with(&format!("sked: invalid {kind} payload")),
                "{said}"
            );
        }
    }
}

/// A task enqueued by SQL exists only once the caller's transaction commits, and is announced
/// then; it is stored as `enqueue_in` stores the same task; unique keys and debounce behave as
/// through the store; `sked_enqueue_many` takes the API's JSON, all or none.
#[tokio::test]
async fn sql_enqueue_commits_with_the_caller_and_stores_what_the_store_stores() {
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let mut events = store.subscribe().unwrap();
    while !matches!(events.recv().await, Ok(StoreEvent::Listening)) {}
    let mut c = app(&schema).await;

    let tx = c.transaction().await.unwrap();
    tx.query_one("SELECT sked_enqueue('receipt', '{\"order\": 1}')", &[])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(tasks(&store).await.is_empty(), "a rolled-back task exists");
    assert!(!announced(&mut events, Duration::from_millis(300)).await);

    let tx = c.transaction().await.unwrap();
    let id: i64 = tx
        .query_one(
            "SELECT sked_enqueue('receipt', '{\"order\": 2}', queue => 'mail')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(tasks(&store).await.is_empty(), "visible before commit");
    assert!(
        !announced(&mut events, Duration::from_millis(300)).await,
        "announced before commit"
    );
    tx.commit().await.unwrap();
    assert!(
        announced(&mut events, Duration::from_secs(5)).await,
        "not announced at commit"
    );
    assert_eq!(tasks(&store).await[0].id, id);

    // The same task through both paths: the same row, but for ids and times.
    let full = NewTask::new("report")
        .queue("reports")
        .payload(json!({"day": "2026-11-29"}))
        .priority(3)
        .max_attempts(4)
        .timeout(SignedDuration::from_secs(30))
        .key("tenant-7")
        .backoff(SignedDuration::from_secs(2), SignedDuration::from_secs(60))
        .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .run_at(jiff::Timestamp::now() + SignedDuration::from_secs(3600))
        .ttl(SignedDuration::from_secs(1800));
    let by_sql = sql_enqueue(&c, &full).await.unwrap();
    let by_rust = sked_postgres::enqueue_in(&c, vec![full]).await.unwrap()[0].id;
    let row = |id: i64| {
        let c = &c;
        async move {
            let r = c
                .query_one(
                    "SELECT to_jsonb(t) - 'id' - 'created_at' FROM sked_tasks t WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            r.get::<_, Value>(0)
        }
    };
    assert_eq!(row(by_sql).await, row(by_rust).await);
    // The JSON form takes a deadline too: a TTL counted from now, and a time.
    let ids: Vec<i64> = (c
        .query(
            "SELECT sked_enqueue_many( \
           '[{\"kind\": \"k\", \"ttl\": \"30m\"}, \
             {\"kind\": \"k\", \"run_at\": \"2099-01-01T00:00:00Z\", \
              \"expires_at\": \"2099-01-01T01:00:00Z\"}]')",
            &[],
        )
        .await
        .unwrap()
        .iter())
    .map(|r| r.get(0))
    .collect();
    let rows = c
        .query(
            "SELECT (expires_at - run_at)::text FROM sked_tasks WHERE id = ANY($1) ORDER BY id",
            &[&ids],
        )
        .await
        .unwrap();
    let minutes: Vec<String> = rows.iter().map(|r| r.get::<_, String>(0)).collect();
    assert_eq!(minutes, ["00:30:00", "01:00:00"]);

    // Unique keys: the holder's id; debounce: the waiting task takes the payload.
    let keyed = NewTask::new("k").unique_key("report-42");
    let first = sql_enqueue(&c, &keyed).await.unwrap();
    assert_eq!(sql_enqueue(&c, &keyed).await.unwrap(), first);
    let through_store = sked_postgres::enqueue_in(&c, vec![keyed]).await.unwrap();
    assert!(through_store[0].duplicate);
    assert_eq!(through_store[0].id, first);
    // A window holds the key, and no longer though its task has not run; an unfinished task
    // without a window holds it against a window too.
    let windowed = NewTask::new("k")
        .unique_key("weekly")
        .unique_for(SignedDuration::from_millis(500))
        .run_at(jiff::Timestamp::now() + SignedDuration::from_secs(3600));
    let held = sql_enqueue(&c, &windowed).await.unwrap();
    assert_eq!(sql_enqueue(&c, &windowed).await.unwrap(), held);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let next = sql_enqueue(&c, &windowed).await.unwrap();
    assert_ne!(
        next, held,
        "a closed window held the key of a task that has not run"
    );
    let plain_key = NewTask::new("k").unique_key("weekly");
    assert_eq!(sql_enqueue(&c, &plain_key).await.unwrap(), next);
    let against = windowed.clone().unique_key("report-42");
    assert_eq!(sql_enqueue(&c, &against).await.unwrap(), first);
    let quiet = |n: i64| {
        NewTask::new("k")
            .unique_key("digest")
            .debounce(SignedDuration::from_secs(60))
            .payload(json!({ "n": n }))
    };
    let waiting = sql_enqueue(&c, &quiet(1)).await.unwrap();
    assert_eq!(sql_enqueue(&c, &quiet(2)).await.unwrap(), waiting);
    let payload: Value = c
        .query_one("SELECT payload FROM sked_tasks WHERE id = $1", &[&waiting])
        .await
        .unwrap()
        .get(0);
    assert_eq!(payload, json!({"n": 2}));

    // Many, in the API's JSON: ids in order; a bad one refuses them all, naming it.
    let many = json!([
        {"kind": "a", "payload": {"x": 1}},
        {"kind": "b", "queue": "mail", "timeout": "30s", "backoff": {"base": "1s", "max": "1m"}},
    ]);
    let ids: Vec<i64> = c
        .query("SELECT * FROM sked_enqueue_many($1)", &[&many])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0] < ids[1]);
    let timeout: Option<i64> = c
        .query_one(
            "SELECT timeout_ms FROM sked_tasks WHERE id = $1",
            &[&ids[1]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(timeout, Some(30_000));
    let before = tasks(&store).await.len();
    for (bad, said) in [
        (
            json!([{"kind": "a"}, {"kind": "b", "max_attempts": 0}]),
            "task 1: max_attempts must be at least 1",
        ),
        (
            json!([{"kind": "a", "colour": "red"}]),
            "task 0: unknown field `colour`",
        ),
        (json!([{"kind": "a", "timeout": "soon"}]), "task 0: "),
        (json!({"kind": "a"}), "a JSON array"),
    ] {
        let e = c
            .query("SELECT * FROM sked_enqueue_many($1)", &[&bad])
            .await
            .unwrap_err();
        let message = e.as_db_error().unwrap().message().to_string();
        assert!(message.contains(said), "{bad}: {message}");
    }
    assert_eq!(
        tasks(&store).await.len(),
        before,
        "a refused batch made tasks"
    );
}

/// A task with parents enqueued by SQL starts as the store starts it (`enqueue_in`, the
/// reference): waiting, due, cancelled naming its first failed parent or run anyway, with the
/// same row and edges; a parent that does not exist is refused by both alike.
#[tokio::test]
async fn sql_enqueue_starts_a_task_from_its_parents_as_the_store_does() {
    use sked_core::{ParentFailure, TaskState};
    use sked_store::{FinishOutcome, TaskCancelParams, TaskClaimParams, TaskFinishParams};
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let c = app(&schema).await;
    let now = jiff::Timestamp::now();
    // Parents in each state: one running, one succeeded, one dead, one cancelled.
    let ids: Vec<i64> = sked_postgres::enqueue_in(
        &c,
        (0..4)
            .map(|i| NewTask::new(format!("p{i}")).max_attempts(1))
            .collect(),
    )
    .await
    .unwrap()
    .iter()
    .map(|t| t.id)
    .collect();
    let [running, ok, dead, cancelled] = ids[..] else {
        panic!("four parents")
    };
    store
        .task_cancel(TaskCancelParams { id: cancelled, now })
        .await
        .unwrap();
    let claimed = store
        .task_claim(TaskClaimParams {
            queues: vec![],
            kinds: vec![],
            max: 3,
            min_priority: None,
            worker: "w".into(),
            lease_ttl: SignedDuration::from_secs(60),
            timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
            now,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    let end = |id: i64, outcome: FinishOutcome| TaskFinishParams {
        id,
        attempt: 1,
        outcome,
        now,
        jitter: 0.5,
    };
    let failed = FinishOutcome::Failed {
        error: "boom".into(),
        retryable: false,
    };
    store
        .task_finish_many(vec![
            end(ok, FinishOutcome::Succeeded { result: None }),
            end(dead, failed),
        ])
        .await
        .unwrap();
    // And one that expired before it started.
    let expired = sked_postgres::enqueue_in(
        &c,
        vec![
            NewTask::new("p4")
                .run_at(now + SignedDuration::from_secs(5))
                .expires_at(now + SignedDuration::from_secs(10)),
        ],
    )
    .await
    .unwrap()[0]
        .id;
    let gone = store
        .task_expire(sked_store::TaskExpireParams {
            now: now + SignedDuration::from_secs(11),
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(gone, vec![expired]);

    let later = jiff::Timestamp::now() + SignedDuration::from_secs(3600);
    let child = |parents: Vec<i64>, then: ParentFailure| {
        NewTask::new("child")
            .run_at(later)
            .after(parents)
            .on_parent_failure(then)
    };
    let row = |id: i64| {
        let c = &c;
        async move {
            let r = c
                .query_one(
                    "SELECT to_jsonb(t) - 'id' - 'created_at' - 'finished_at' - 'wait', \
                       t.finished_at IS NOT NULL, \
                       (SELECT jsonb_build_array(w.parents_left, w.run_anyway, w.tasks = ARRAY[t.id], \
                          (SELECT jsonb_agg(jsonb_build_array(e.parent, e.done) ORDER BY e.parent) \
                           FROM sked_wait_parents e WHERE e.wait = w.id)) \
                        FROM sked_waits w WHERE w.id = t.wait) \
                     FROM sked_tasks t WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (
                r.get::<_, Value>(0),
                r.get::<_, bool>(1),
                r.get::<_, Value>(2),
            )
        }
    };
    use ParentFailure::{Cancel, Run};
    for (parents, then, state) in [
        (vec![running], Cancel, "waiting"),
        (vec![ok], Cancel, "scheduled"),
        (vec![ok, running], Cancel, "waiting"),
        (vec![dead], Cancel, "cancelled"),
        (vec![running, cancelled, dead], Cancel, "cancelled"),
        (vec![dead, ok], Run, "scheduled"),
        (vec![cancelled, running], Run, "waiting"),
        (vec![expired], Cancel, "cancelled"),
        (vec![expired, running], Run, "waiting"),
        (vec![expired, ok], Run, "scheduled"),
    ] {
        let t = child(parents.clone(), then);
        let by_sql = sql_enqueue(&c, &t).await.unwrap();
        let by_rust = sked_postgres::enqueue_in(&c, vec![t]).await.unwrap()[0].id;
        let (sql_row, rust_row) = (row(by_sql).await, row(by_rust).await);
        assert_eq!(sql_row, rust_row, "{parents:?} {then:?}");
        assert_eq!(
            sql_row.0["state"], state,
            "{parents:?} {then:?}: {}",
            sql_row.0
        );
    }
    // The first failed parent by id is named, as the store names it.
    let said = row(
        sql_enqueue(&c, &child(vec![running, cancelled, dead], Cancel))
            .await
            .unwrap(),
    )
    .await
    .0["last_error"]
        .clone();
    let first = cancelled.min(dead);
    let expected = match first == cancelled {
        true => format!("parent {first} was cancelled"),
        false => format!("parent {first} ended dead"),
    };
    assert_eq!(said, json!(expected));
    assert_eq!(
        store.task_get(running).await.unwrap().state,
        TaskState::Running
    );
    // A parent that does not exist: both refuse it, in the same words, and nothing is made.
    let before = tasks(&store).await.len();
    let t = child(vec![ok, 987_654], Cancel);
    let said = sql_enqueue(&c, &t).await.unwrap_err();
    let sked_store::StoreError::Invalid(reference) =
        sked_postgres::enqueue_in(&c, vec![t]).await.unwrap_err()
    else {
        panic!("the store took a task whose parent does not exist");
    };
    assert_eq!(said, format!("sked: {reference}"));
    assert_eq!(tasks(&store).await.len(), before);
    // The JSON form takes them too.
    let ids: Vec<i64> = c
        .query(
            "SELECT * FROM sked_enqueue_many($1)",
            &[&json!([{"kind": "child", "depends_on": [running], "on_parent_failure": "run"}])],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let made = store.task_get(ids[0]).await.unwrap();
    assert_eq!(made.state, TaskState::Waiting);
    assert_eq!(
        (made.depends_on, made.on_parent_failure),
        (vec![running], Run)
    );
}

#[tokio::test]
async fn sql_enqueue_joins_a_batch_as_the_store_does() {
    use sked_core::{NewBatch, TaskState};
    use sked_store::{BatchCloseParams, BatchOpenParams, BatchState, TaskCancelParams};
    let Some(url) = database_url() else { return };
    let schema = TestSchema::new(&url);
    let store = sked_postgres::PgStore::connect(schema.options())
        .await
        .unwrap();
    let c = app(&schema).await;
    let now = jiff::Timestamp::now();
    let open = || async {
        let batch = NewBatch {
            name: Some("b".into()),
            on_success: None,
            on_complete: Some(NewTask::new("done")),
        };
        store
            .batch_open(BatchOpenParams { batch, now })
            .await
            .unwrap()
            .id
    };
    let batch = open().await;
    let row = |id: i64| {
        let c = &c;
        async move {
            let r = c
                .query_one(
                    "SELECT to_jsonb(t) - 'id' - 'created_at' - 'finished_at' - 'run_at' - 'wait', \
                       (SELECT to_jsonb(b) - 'task' FROM sked_batch_tasks b WHERE b.task = t.id) \
                     FROM sked_tasks t WHERE id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            (r.get::<_, Value>(0), r.get::<_, Value>(1))
        }
    };
    // A task that joins, and one that starts cancelled (its parent was): both as the store.
    let parent = sked_postgres::enqueue_in(&c, vec![NewTask::new("p")])
        .await
        .unwrap()[0]
        .id;
    store
        .task_cancel(TaskCancelParams { id: parent, now })
        .await
        .unwrap();
    for t in [
        NewTask::new("member").batch(batch),
        NewTask::new("member").batch(batch).after([parent]),
    ] {
        let by_sql = sql_enqueue(&c, &t).await.unwrap();
        let by_rust = sked_postgres::enqueue_in(&c, vec![t]).await.unwrap()[0].id;
        let (sql_row, rust_row) = (row(by_sql).await, row(by_rust).await);
        assert_eq!(sql_row, rust_row);
        assert_eq!(sql_row.1["batch"], json!(batch), "{sql_row:?}");
    }
    let b = store.batch_get(batch).await.unwrap();
    assert_eq!(
        (b.total, b.counts.get(&TaskState::Cancelled)),
        (4, Some(&2))
    );
    // An unknown batch and one that has ended: both refused, in the store's words.
    let empty = open().await;
    store
        .batch_close(BatchCloseParams { id: empty, now })
        .await
        .unwrap();
    assert_eq!(
        store.batch_get(empty).await.unwrap().state,
        BatchState::Done
    );
    let before = tasks(&store).await.len();
    let mut own = app(&schema).await;
    for id in [987_654, empty] {
        let t = NewTask::new("late").batch(id);
        let said = sql_enqueue(&c, &t).await.unwrap_err();
        // The store's join comes after its insert: in the caller's transaction, which the
        // refusal leaves to roll back.
        let tx = own.transaction().await.unwrap();
        let reference = sked_postgres::enqueue_in(&tx, vec![t]).await.unwrap_err();
        drop(tx);
        let (sked_store::StoreError::Invalid(reference)
        | sked_store::StoreError::Conflict(reference)) = reference
        else {
            panic!("the store took a task for batch {id}");
        };
        assert_eq!(said, format!("sked: {reference}"));
    }
    assert_eq!(tasks(&store).await.len(), before);
    // The JSON form joins too; the batch then ends when closed and its tasks have ended.
    let ids: Vec<i64> = c
        .query(
            "SELECT * FROM sked_enqueue_many($1)",
            &[&json!([{"kind": "member", "batch": batch}])],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(row(ids[0]).await.1["open"], json!(true));
    store
        .batch_close(BatchCloseParams { id: batch, now })
        .await
        .unwrap();
    let open_ids: Vec<i64> = c
        .query(
            "SELECT task FROM sked_batch_tasks WHERE batch = $1 AND open",
            &[&batch],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(open_ids.len(), 3);
    for id in open_ids {
        store
            .task_cancel(TaskCancelParams { id, now })
            .await
            .unwrap();
    }
    let b = store.batch_get(batch).await.unwrap();
    assert_eq!(b.state, BatchState::Done);
    assert!(b.on_complete_task.is_some());
}
