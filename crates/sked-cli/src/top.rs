//! `sked top`: a live overview in the terminal, from the same public API as the dashboard.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use crate::client::Http;
use crate::output::{queue_count, table_string, text, time_in};
use crate::{CliError, CliResult, Remote};

#[derive(Args)]
pub(crate) struct TopArgs {
    /// How often to redraw.
    #[arg(long, default_value = "2s", value_name = "DUR")]
    interval: String,
    /// Print one frame and exit (also what happens when stdout is not a terminal).
    #[arg(long)]
    once: bool,
}

pub(crate) async fn top(a: TopArgs, remote: &Remote) -> CliResult {
    let interval = sked_core::parse_duration(&a.interval)
        .ok()
        .and_then(|d| Duration::try_from(d).ok())
        .filter(|d| *d >= Duration::from_millis(200))
        .ok_or_else(|| {
            CliError::usage(format!(
                "invalid --interval {:?}: a duration of at least 200ms, like 2s",
                a.interval
            ))
        })?;
    let http = Http::new(remote);
    let live = !a.once && std::io::stdout().is_terminal();
    loop {
        let frame = frame(&http).await?;
        if live {
            // Home and clear, then the frame: one redraw per interval.
            out!("\x1b[H\x1b[2J{}", frame.trim_end());
        } else {
            out!("{}", frame.trim_end());
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Sparkline of a series, one block per value.
fn spark(values: &[u64]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    values
        .iter()
        .map(|&v| {
            if v == 0 {
                ' '
            } else {
                BLOCKS[((v * 7) / max) as usize]
            }
        })
        .collect()
}

async fn frame(http: &Http) -> CliResult<String> {
    let (cluster, queues, activity, workers, schedules) = tokio::try_join!(
        http.get("/v1/cluster"),
        http.get("/v1/queues"),
        http.get("/v1/activity?minutes=15"),
        http.get("/v1/workers"),
        http.get("/v1/schedules"),
    )?;
    let list = |v: &Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    let workers = list(&workers, "workers");
    let alive: Vec<&Value> = workers.iter().filter(|w| w["alive"] == true).collect();
    let count_role = |role: &str| alive.iter().filter(|w| w["role"] == role).count();
    let mut f = String::new();
    let _ = writeln!(
        f,
        "sked · {} · leader {} · {} workers, {} nodes alive · {}",
        text(&cluster["backend"]),
        text(&cluster["leader"]),
        count_role("worker"),
        count_role("node"),
        jiff::Zoned::now().strftime("%H:%M:%S"),
    );
    let buckets = list(&activity, "buckets");
    let series =
        |k: &str| -> Vec<u64> { buckets.iter().map(|b| b[k].as_u64().unwrap_or(0)).collect() };
    let (ok, failed, dead, cancelled) = (
        series("succeeded"),
        series("failed"),
        series("dead"),
        series("cancelled"),
    );
    let _ = writeln!(
        f,
        "last 15 min: succeeded {} [{}]  failed {} [{}]  dead {}  cancelled {}\n",
        ok.iter().sum::<u64>(),
        spark(&ok),
        failed.iter().sum::<u64>(),
        spark(&failed),
        dead.iter().sum::<u64>(),
        cancelled.iter().sum::<u64>(),
    );
    let rows = list(&queues, "queues")
        .iter()
        .map(|q| {
            let mut row = vec![text(&q["name"])];
            row.extend(sked_core::TaskState::ALL.map(|s| queue_count(q, s.as_str())));
            row.push(if q["paused"] == true { "paused" } else { "" }.into());
            row
        })
        .collect();
    f.push_str(&table_string(
        &[
            "QUEUE", "SCHED", "AVAIL", "RUN", "RETRY", "OK", "DEAD", "CANC", "",
        ],
        rows,
    ));
    let rows: Vec<Vec<String>> = list(&schedules, "schedules")
        .iter()
        .map(|s| {
            let outcome = if s["running"] == true {
                "running".to_string()
            } else {
                text(&s["last_outcome"])
            };
            vec![
                text(&s["name"]),
                text(&s["spec"]),
                if s["paused"] == true {
                    "paused".into()
                } else {
                    time_in(&s["next_fire_at"], &s["tz"])
                },
                outcome,
            ]
        })
        .collect();
    if !rows.is_empty() {
        f.push('\n');
        f.push_str(&table_string(
            &["SCHEDULE", "SPEC", "NEXT FIRE", "LAST"],
            rows,
        ));
    }
    let rows: Vec<Vec<String>> = alive
        .iter()
        .map(|w| {
            vec![
                text(&w["id"]),
                text(&w["role"]),
                text(&w["running"]),
                text(&w["concurrency"]),
            ]
        })
        .collect();
    if !rows.is_empty() {
        f.push('\n');
        f.push_str(&table_string(
            &["ALIVE", "ROLE", "RUNNING", "CONCURRENCY"],
            rows,
        ));
    }
    Ok(f)
}
