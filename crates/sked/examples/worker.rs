//! A Rust service that embeds sked: typed handlers, a recurring job declared next to them, and
//! graceful shutdown on Ctrl-C.
//!
//! ```text
//! cargo run -p sked --example worker                                  # embedded: ./example.db
//! SKED_SERVER=http://127.0.0.1:7070 cargo run -p sked --example worker # remote: a sked server
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sked::worker::{HandlerResult, TaskContext, TaskError, Worker};
use sked::{Client, Engine, EngineConfig};
use sked_core::{NewTask, ScheduleDef};

#[derive(Deserialize)]
struct Email {
    to: String,
    subject: String,
}

#[derive(Serialize)]
struct Sent {
    message_id: String,
}

async fn send_email(ctx: TaskContext, email: Email) -> HandlerResult<Sent> {
    if !email.to.contains('@') {
        // Retrying will not fix an address: the task is dead at once.
        return Err(TaskError::fatal(format!("not an address: {}", email.to)));
    }
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        _ = ctx.cancelled() => return Err(TaskError::cancelled()),
    }
    println!(
        "sent {:?} to {} (attempt {})",
        email.subject,
        email.to,
        ctx.attempt()
    );
    Ok(Sent {
        message_id: format!("msg-{}", ctx.id()),
    })
}

#[derive(Deserialize)]
struct Report {
    format: String,
}

async fn nightly_report(_ctx: TaskContext, r: Report) -> HandlerResult {
    println!("building the {} report", r.format);
    Ok(())
}

#[tokio::main]
async fn main() -> sked::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let client = match std::env::var("SKED_SERVER") {
        Ok(url) => Client::remote(&url)?,
        Err(_) => {
            let store = sked::open_store("sqlite://example.db").await?;
            let engine = Engine::new(store, EngineConfig::default());
            // Embedded, this process also does the leader's duties: turning schedules into
            // tasks, rescuing expired leases, pruning.
            tokio::spawn(sked::maintenance::run(
                engine.clone(),
                sked::MaintenanceConfig::default(),
                stopped,
            ));
            Client::embedded(engine)
        }
    };
    // Declared in code, kept in sync at every start (see docs/worker-protocol.md for the rules).
    let nightly: ScheduleDef = serde_json::from_value(serde_json::json!({
        "name": "nightly-report",
        "spec": "0 3 * * *",
        "tz": "Europe/Paris",
        "task": {"kind": "report", "payload": {"format": "pdf"}}
    }))
    .expect("a valid schedule");

    let mut email = NewTask::new("email");
    email.payload = serde_json::json!({"to": "ada@example.com", "subject": "Welcome"});
    let id = client.enqueue(email).await?.id;
    println!("enqueued task {id}");

    let report = Worker::new(client)
        .queue("default", 10)
        .handle("email", send_email)
        .handle("report", nightly_report)
        .schedules("example-service", vec![nightly])
        .shutdown_grace(Duration::from_secs(10))
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    let _ = stop.send(true);
    println!("stopped: {report:?}");
    Ok(())
}
