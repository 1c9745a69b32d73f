//! `sked top`: a live overview in the terminal, from the same public API as the dashboard.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use sked::Client;
use sked::api::Overview;

use crate::client::{connect, failed};
use crate::output::{opt, queue_count, table_string, time_in};
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
    let client = connect(remote)?;
    if remote.json {
        // One snapshot: the values the frame is drawn from.
        out!(
            "{}",
            serde_json::to_string_pretty(&overview(&client).await?).unwrap_or_default()
        );
        return Ok(());
    }
    let live = !a.once && std::io::stdout().is_terminal();
    loop {
        let frame = frame(&overview(&client).await?);
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

/// Everything a frame shows, read at once.
async fn overview(client: &Client) -> CliResult<Overview> {
    let all = sked::store::ScheduleFilter::default();
    let (cluster, queues, activity, workers, schedules) = tokio::try_join!(
        client.cluster(),
        client.queues(sked::store::QUEUE_COUNT_LIMIT),
        client.activity(15),
        client.workers(),
        client.schedule_page(&all, None, sked::api::OVERVIEW_SCHEDULES, false, true),
    )
    .map_err(failed)?;
    Ok(Overview {
        cluster,
        queues,
        activity,
        schedule_count: schedules.count.unwrap_or(0),
        schedule_count_at_least: schedules.count_at_least,
        schedules: schedules.schedules,
        workers,
    })
}

fn frame(o: &Overview) -> String {
    let alive: Vec<_> = o.workers.iter().filter(|w| w.alive).collect();
    let count_role = |role: &str| alive.iter().filter(|w| w.role == role).count();
    let mut f = String::new();
    let _ = writeln!(
        f,
        "sked · {} · leader {} · {} workers, {} nodes alive · {}",
        o.cluster.backend,
        opt(o.cluster.leader.as_ref()),
        count_role("worker"),
        count_role("node"),
        jiff::Zoned::now().strftime("%H:%M:%S"),
    );
    let buckets = &o.activity.buckets;
    let series = |k: fn(&sked::store::ActivityBucket) -> u64| -> Vec<u64> {
        buckets.iter().map(k).collect()
    };
    let (ok, failed, dead, cancelled) = (
        series(|b| b.succeeded),
        series(|b| b.failed),
        series(|b| b.dead),
        series(|b| b.cancelled),
    );
    let _ = writeln!(
        f,
        "last 15 min: succeeded {} [{}]  failed {} [{}]  dead {}  cancelled {}  expired {}\n",
        ok.iter().sum::<u64>(),
        spark(&ok),
        failed.iter().sum::<u64>(),
        spark(&failed),
        dead.iter().sum::<u64>(),
        cancelled.iter().sum::<u64>(),
        buckets.iter().map(|b| b.expired).sum::<u64>(),
    );
    let rows = o
        .queues
        .iter()
        .map(|q| {
            let mut row = vec![q.name.clone()];
            row.extend(sked::TaskState::ALL.map(|s| queue_count(q, s)));
            row.push(if q.paused { "paused" } else { "" }.into());
            row
        })
        .collect();
    f.push_str(&table_string(
        &[
            "QUEUE", "SCHED", "AVAIL", "RUN", "RETRY", "OK", "DEAD", "CANC", "",
        ],
        rows,
    ));
    let rows: Vec<Vec<String>> = o
        .schedules
        .iter()
        .map(|s| {
            let outcome = match (s.running, &s.retrying) {
                (true, _) => "running".to_string(),
                (false, Some(r)) => format!("retrying {}/{}", r.attempt, r.max_attempts),
                (false, None) => opt(s.last_outcome.as_ref()),
            };
            vec![
                s.name.clone(),
                s.spec.clone(),
                match (s.paused, &s.ended) {
                    (true, _) => "paused".into(),
                    (false, Some(_)) => "ended".into(),
                    (false, None) => time_in(s.next_fire_at, &s.tz),
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
        let shown = o.schedules.len() as u64;
        if o.schedule_count > shown {
            let _ = writeln!(
                f,
                "… the first {shown} of {}{} schedules (sked schedule ls)",
                o.schedule_count,
                if o.schedule_count_at_least { "+" } else { "" }
            );
        }
    }
    let rows: Vec<Vec<String>> = alive
        .iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.role.clone(),
                w.running.to_string(),
                opt(w.concurrency.as_ref()),
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
    f
}
