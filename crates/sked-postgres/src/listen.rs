//! Announcements through LISTEN/NOTIFY.
//!
//! Every statement that makes work appear sends one `pg_notify` on the schema's channel (one
//! per statement, not per row, however many tasks it inserts); the store's own enqueues send it
//! as the statement right after their insert (see `tasks::insert`). Payloads:
//! `t` (tasks may be claimable now), `t<µs>p<priority>` (the earliest run time among new tasks,
//! in microseconds since the epoch, and their highest priority), followed by `w<µs>` when some of
//! them wait (scheduled or retrying: the earliest of their run times), `s` (schedules changed),
//! `l<name>` (a lease was given up) and `r` (an attempt ended in a queue with a concurrency or
//! per-key limit: room may have freed).
//!
//! The listener hands each task announcement to the store's claim state ([`ClaimHints`]) before
//! it passes it on, so a claim woken by it starts early enough.
//!
//! One dedicated connection per store listens and turns notifications into [`StoreEvent`]s.
//! When it drops, subscribers get [`StoreEvent::Deaf`] and poll; it reconnects with backoff and
//! sends [`StoreEvent::Listening`] once it is back. A listening connection hears nothing when
//! its network is cut or its server has become a standby (after a failover), so it asks its
//! server whether it is still the primary whenever a pooled connection has just failed
//! ([`Listener::doubt`]), and reconnects (through the URL's hosts, to the one that takes
//! writes) when the answer is no or does not come within [`CHECK_TIMEOUT`]. Every node runs
//! pooled operations every few seconds (the leader lease), so a failover is noticed there
//! first; with a sound database the check costs nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use jiff::Timestamp;
use sked_store::StoreEvent;
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the listener tells the store's claim state (the claim positions and when a waiting task
/// is due), which implements it: the listener knows announcements, not claims.
pub(crate) trait ClaimHints: Send + Sync {
    /// Tasks were announced: claimable from `first` on (`None`: from where is not said), and
    /// the earliest of those that wait is due at `waiting`.
    fn announced(&self, first: Option<Announced>, waiting: Option<Timestamp>);
    /// Announcements may have been missed (the connection dropped or came back).
    fn missed(&self);
}

/// The first claim-order position a task announcement names: its tasks' highest priority and
/// their earliest run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Announced {
    pub(crate) priority: i32,
    pub(crate) run_at: Timestamp,
}

/// How long that check may take before the connection counts as lost.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The channel of one schema's announcements.
pub(crate) fn channel_for(schema: &str) -> String {
    format!("sked_{schema}")
}

/// The `pg_notify` call that announces tasks, given the SQL expressions of their earliest run
/// time, their highest priority, and the earliest run time of those that wait (null when none
/// does).
pub(crate) fn notify_tasks_sql(run_at: &str, priority: &str, waiting: &str) -> String {
    format!(
        "pg_notify($1, 't' || coalesce((extract(epoch from {run_at}) * 1000000)::bigint::text, '') \
           || coalesce('p' || ({priority})::text, '') \
           || coalesce('w' || (extract(epoch from {waiting}) * 1000000)::bigint::text, ''))"
    )
}

/// What a task announcement names: the first claim-order position of its tasks, and when the
/// earliest of those that wait is due. `None` when it names no position.
fn announced(rest: &str) -> Option<(Announced, Option<Timestamp>)> {
    let (us, rest) = rest.split_once('p')?;
    let (priority, waiting) = match rest.split_once('w') {
        Some((priority, waiting)) => (priority, Some(micros(waiting)?)),
        None => (rest, None),
    };
    let first = Announced {
        priority: priority.parse().ok()?,
        run_at: micros(us)?,
    };
    Some((first, waiting))
}

fn micros(us: &str) -> Option<Timestamp> {
    Timestamp::from_microsecond(us.parse().ok()?).ok()
}

pub(crate) fn parse(payload: &str) -> Option<StoreEvent> {
    let (kind, rest) = payload.split_at_checked(1)?;
    match kind {
        "t" if rest.is_empty() => Some(StoreEvent::Tasks { run_at: None }),
        "t" => Some(StoreEvent::Tasks {
            run_at: match announced(rest) {
                Some((first, waiting)) => waiting.or(Some(first.run_at)),
                None => micros(rest),
            },
        }),
        "s" => Some(StoreEvent::Schedules),
        "r" if rest.is_empty() => Some(StoreEvent::Room),
        "l" => Some(StoreEvent::LeaseReleased { name: rest.into() }),
        _ => None,
    }
}

/// Hands a task announcement to the claim state.
fn hint(hints: &dyn ClaimHints, payload: &str) {
    if let Some(rest) = payload.strip_prefix('t') {
        let (first, waiting) = announced(rest).unzip();
        hints.announced(first, waiting.flatten());
    }
}

/// The listening task; stops when dropped.
#[derive(Debug)]
pub(crate) struct Listener {
    task: tokio::task::JoinHandle<()>,
    /// Whether the LISTEN connection is up now.
    pub(crate) up: Arc<AtomicBool>,
    /// Woken when a pooled connection failed: the listening one may have failed too.
    doubts: Arc<Notify>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Listener {
    pub(crate) fn start(
        config: tokio_postgres::Config,
        tls: MakeRustlsConnect,
        channel: String,
        events: broadcast::Sender<StoreEvent>,
        hints: Arc<dyn ClaimHints>,
    ) -> Listener {
        let up = Arc::new(AtomicBool::new(false));
        let doubts = Arc::new(Notify::new());
        let task = tokio::spawn(run(
            config,
            tls,
            channel,
            events,
            hints,
            up.clone(),
            doubts.clone(),
        ));
        Listener { task, up, doubts }
    }

    /// Makes the listener check its connection now (a pooled one just failed).
    pub(crate) fn doubt(&self) {
        self.doubts.notify_one();
    }
}

async fn run(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    channel: String,
    events: broadcast::Sender<StoreEvent>,
    hints: Arc<dyn ClaimHints>,
    up: Arc<AtomicBool>,
    doubts: Arc<Notify>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match listen_once(&config, &tls, &channel, &events, &*hints, &up, &doubts).await {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(error = %e, "PostgreSQL listener disconnected; polling until it is back")
            }
        }
        up.store(false, Ordering::SeqCst);
        // Announcements sent while deaf are lost.
        hints.missed();
        let _ = events.send(StoreEvent::Deaf);
        tokio::time::sleep(backoff + Duration::from_millis(fastrand::u64(..100))).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Whether the listening connection's server answers, within [`CHECK_TIMEOUT`], and is not a
/// standby. One round trip (the simple query protocol): PostgreSQL counts it as one
/// transaction.
async fn check_server(client: &tokio_postgres::Client) -> Result<(), String> {
    let asked = client.simple_query("SELECT pg_is_in_recovery()");
    let rows = match tokio::time::timeout(CHECK_TIMEOUT, asked).await {
        Ok(rows) => rows.map_err(|e| e.to_string())?,
        Err(_) => {
            return Err(format!(
                "its server did not answer within {CHECK_TIMEOUT:?}"
            ));
        }
    };
    let standby = rows.iter().any(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("t"),
        _ => false,
    });
    if standby {
        return Err("its server has become a standby".into());
    }
    Ok(())
}

/// Connects, listens, and forwards notifications until the connection ends.
async fn listen_once(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    channel: &str,
    events: &broadcast::Sender<StoreEvent>,
    hints: &dyn ClaimHints,
    up: &AtomicBool,
    doubts: &Notify,
) -> Result<(), String> {
    let (client, mut connection) = config
        .connect(tls.clone())
        .await
        .map_err(|e| e.to_string())?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    // The connection must be polled for the client's queries to make progress; its messages
    // are the notifications.
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(Ok(n.payload().to_string())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    let listened = client.batch_execute(&format!("LISTEN \"{channel}\"")).await;
    if let Err(e) = listened {
        driver.abort();
        return Err(e.to_string());
    }
    tracing::debug!(%channel, "listening for announcements");
    up.store(true, Ordering::SeqCst);
    hints.missed();
    let _ = events.send(StoreEvent::Listening);
    let result = loop {
        tokio::select! {
            message = rx.recv() => match message {
                Some(Ok(payload)) => {
                    hint(hints, &payload);
                    if let Some(event) = parse(&payload) {
                        let _ = events.send(event);
                    }
                }
                Some(Err(e)) => break Err(e.to_string()),
                None => break Ok(()),
            },
            _ = doubts.notified() => {
                if let Err(e) = check_server(&client).await {
                    break Err(e);
                }
            }
        }
    };
    driver.abort();
    drop(client);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse() {
        assert_eq!(parse("t"), Some(StoreEvent::Tasks { run_at: None }));
        assert_eq!(
            parse("t1767225600000000"),
            Some(StoreEvent::Tasks {
                run_at: Some("2026-01-01T00:00:00Z".parse().unwrap())
            })
        );
        assert_eq!(
            parse("t1767225600000000p-3"),
            Some(StoreEvent::Tasks {
                run_at: Some("2026-01-01T00:00:00Z".parse().unwrap())
            })
        );
        assert_eq!(
            announced("1767225600000000p-3"),
            Some((
                Announced {
                    priority: -3,
                    run_at: "2026-01-01T00:00:00Z".parse().unwrap()
                },
                None
            ))
        );
        // Some wait: the engine learns when the first of them is due.
        let first = "2026-01-01T00:00:00Z".parse().unwrap();
        let waiting = "2026-01-01T00:00:05Z".parse().unwrap();
        assert_eq!(
            announced("1767225600000000p2w1767225605000000"),
            Some((
                Announced {
                    priority: 2,
                    run_at: first
                },
                Some(waiting)
            ))
        );
        assert_eq!(
            parse("t1767225600000000p2w1767225605000000"),
            Some(StoreEvent::Tasks {
                run_at: Some(waiting)
            })
        );
        assert_eq!(announced("1767225600000000"), None);
        assert_eq!(announced("1767225600000000p2wx"), None);
        assert_eq!(announced(""), None);
        assert_eq!(parse("s"), Some(StoreEvent::Schedules));
        assert_eq!(parse("r"), Some(StoreEvent::Room));
        assert_eq!(
            parse("lleader"),
            Some(StoreEvent::LeaseReleased {
                name: "leader".into()
            })
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse("x"), None);
    }
}
