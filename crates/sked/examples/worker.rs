//! A Rust service that embeds sked: typed handlers, a recurring job declared next to them, and
//! graceful shutdown on Ctrl-C.
//!
//! ```text
//! cargo run -p sked --example worker                                  # embedded: ./example.db
//! SKED_URL=http://127.0.0.1:7070 cargo run -p sked --example worker    # remote: a sked server
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use sked::worker::{HandlerResult, TaskContext, TaskError, Worker};
use sked::{Client, NewTask, Node, ScheduleDef, TaskTemplate};

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
    // Declared in code, kept in sync at every start (see docs/worker-protocol.md for the rules).
    let nightly = ScheduleDef::new(
        "nightly-report",
        "0 3 * * *",
        TaskTemplate::new("report").payload(json!({"format": "pdf"})),
    )
    .tz("Europe/Paris");
    let worker = move |w: Worker| {
        w.queue("default", 10)
            .handle("email", send_email)
            .handle("report", nightly_report)
            .schedules("example-service", vec![nightly])
            .shutdown_grace(Duration::from_secs(10))
    };
    let email =
        NewTask::new("email").payload(json!({"to": "ada@example.com", "subject": "Welcome"}));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let report = match std::env::var("SKED_URL") {
        // Remote: a sked server does the rest.
        Ok(url) => {
            let client = Client::remote(&url)?;
            println!("enqueued task {}", client.enqueue(email).await?.id);
            worker(Worker::new(client)).run(stop).await?
        }
        // Embedded: this process is a whole node. It also takes part in maintenance (turning
        // schedules into tasks, rescuing expired leases, pruning).
        Err(_) => {
            let node = Node::builder()
                .db("sqlite://example.db")
                .worker(worker)
                .start()
                .await?;
            println!("enqueued task {}", node.client().enqueue(email).await?.id);
            node.run_until(stop).await?.unwrap_or_default()
        }
    };
    println!("stopped: {report:?}");
    Ok(())
}
