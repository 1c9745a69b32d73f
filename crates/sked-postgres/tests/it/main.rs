//! The integration tests of the PostgreSQL backend, linked as one binary: the conformance
//! suite, transactional enqueue and abandoned transactions.

mod abandoned;
mod announce;
mod claimers;
mod conformance;
mod kept_stages;
mod next_due;
mod plans;
mod reserved;
mod resume;
mod room;
mod snapshot;
mod sql_enqueue;
mod taking_turns;
mod transactional;
mod waits;
mod workflows;

/// A claim by worker `w` of at most `max` tasks from `queues` (every queue when empty) at
/// `now`, leased for a minute.
fn claim_params(queues: &[&str], max: u32, now: jiff::Timestamp) -> sked_store::TaskClaimParams {
    sked_store::TaskClaimParams {
        queues: queues.iter().map(|q| q.to_string()).collect(),
        kinds: vec![],
        max,
        min_priority: None,
        worker: "w".into(),
        lease_ttl: jiff::SignedDuration::from_secs(60),
        timeout_grace: sked_store::rules::DEFAULT_TIMEOUT_GRACE,
        now,
    }
}

/// A task of kind `k` named `name`, after the workflow's tasks at places `after`.
fn node(name: String, after: Vec<usize>) -> sked_store::WorkflowTaskInsert {
    sked_store::WorkflowTaskInsert {
        name,
        after,
        insert: sked_core::NewTask::new("k").into(),
    }
}

/// A workflow of `tasks`, without a name or a schedule, made at `now`.
fn workflow_of(
    tasks: Vec<sked_store::WorkflowTaskInsert>,
    now: jiff::Timestamp,
) -> sked_store::WorkflowCreateParams {
    sked_store::WorkflowCreateParams {
        name: None,
        tasks,
        schedule: None,
        nominal_at: None,
        now,
    }
}

/// The URL of a connection of the application's whose `search_path` reaches `schema`'s tables.
fn schema_url(schema: &sked_postgres::testing::TestSchema) -> String {
    let sep = if schema.base_url.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{sep}options=-csearch_path%3D{}",
        schema.base_url, schema.name
    )
}

/// A schema left as a store before migration `version` left it, holding what `rows` (SQL run
/// in it after those migrations) writes; none without a database.
async fn schema_before(version: i32, rows: &str) -> Option<sked_postgres::testing::TestSchema> {
    let url = sked_postgres::testing::database_url()?;
    let schema = sked_postgres::testing::TestSchema::new(&url);
    let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut files: Vec<std::path::PathBuf> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
    files.sort();
    let name = &schema.name;
    let mut sql = format!(
        "CREATE SCHEMA {name}; SET search_path TO {name}; \
         CREATE TABLE sked_migrations (version integer PRIMARY KEY, \
           applied_at timestamptz NOT NULL DEFAULT now());"
    );
    for f in &files {
        let stem = f.file_stem().unwrap().to_str().unwrap();
        let applied: i32 = stem[..4].parse().unwrap();
        if applied < version {
            sql.push_str(&std::fs::read_to_string(f).unwrap());
            sql.push_str(&format!(
                ";\nINSERT INTO sked_migrations (version) VALUES ({applied});\n"
            ));
        }
    }
    sql.push_str(rows);
    c.batch_execute(&sql).await.unwrap();
    Some(schema)
}
