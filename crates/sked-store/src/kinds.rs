//! Figures per task kind over a recent window: runs per minute, the share that failed, and
//! run times at the 50th and 95th percentile. The stores read samples of ended runs (bounded);
//! the figures are made here, once for both backends.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// Which ended runs to read: those that ended at or after `since`, at most `limit` of the
/// ended tasks and `limit` of the failed attempts.
#[derive(Debug, Clone)]
pub struct RunSamplesParams {
    pub since: Timestamp,
    pub limit: u32,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Succeeded,
    /// Failed and retried.
    Failed,
    /// Failed for good.
    Dead,
    Cancelled,
    /// Not started by its deadline.
    Expired,
}

/// One ended run: its task's kind, how it ended, and how long it ran (`None` when it never
/// started: a task cancelled while it waited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSample {
    pub kind: String,
    pub end: RunEnd,
    pub run_ms: Option<i64>,
}

/// The figures of one kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KindStats {
    pub kind: String,
    /// Runs that ended (succeeded, failed and retried, or dead).
    pub runs: u64,
    /// Of those, failed ones (retried or dead).
    pub failed: u64,
    /// Tasks cancelled (not counted as runs).
    pub cancelled: u64,
    /// Tasks that expired before they started (not counted as runs).
    #[serde(default)]
    pub expired: u64,
    /// Runs per minute over the window.
    pub runs_per_minute: f64,
    /// `failed` / `runs` (0 when there was no run).
    pub failure_rate: f64,
    /// Run time at the 50th percentile, in milliseconds (null without a timed run).
    pub p50_ms: Option<i64>,
    /// Run time at the 95th percentile, in milliseconds.
    pub p95_ms: Option<i64>,
}

/// The `q`-quantile (0 to 1) of sorted values, by the nearest rank.
fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// The figures per kind, by kind name, of `samples` over a window of `minutes`.
pub fn kind_stats(samples: &[RunSample], minutes: u32) -> Vec<KindStats> {
    #[derive(Default)]
    struct Tally {
        runs: u64,
        failed: u64,
        cancelled: u64,
        expired: u64,
        times: Vec<i64>,
    }
    let mut by_kind: BTreeMap<&str, Tally> = BTreeMap::new();
    for s in samples {
        let t = by_kind.entry(&s.kind).or_default();
        match s.end {
            RunEnd::Cancelled => t.cancelled += 1,
            RunEnd::Expired => t.expired += 1,
            end => {
                t.runs += 1;
                if end != RunEnd::Succeeded {
                    t.failed += 1;
                }
                t.times.extend(s.run_ms);
            }
        }
    }
    by_kind
        .into_iter()
        .map(|(kind, mut t)| {
            t.times.sort_unstable();
            KindStats {
                kind: kind.to_string(),
                runs: t.runs,
                failed: t.failed,
                cancelled: t.cancelled,
                expired: t.expired,
                runs_per_minute: t.runs as f64 / f64::from(minutes.max(1)),
                failure_rate: if t.runs == 0 {
                    0.0
                } else {
                    t.failed as f64 / t.runs as f64
                },
                p50_ms: quantile(&t.times, 0.5),
                p95_ms: quantile(&t.times, 0.95),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: &str, end: RunEnd, ms: Option<i64>) -> RunSample {
        RunSample {
            kind: kind.into(),
            end,
            run_ms: ms,
        }
    }

    #[test]
    fn figures_per_kind() {
        let mut samples: Vec<RunSample> = (1..=100)
            .map(|ms| run("email", RunEnd::Succeeded, Some(ms)))
            .collect();
        samples.push(run("email", RunEnd::Failed, Some(1000)));
        samples.push(run("email", RunEnd::Dead, Some(2000)));
        samples.push(run("email", RunEnd::Cancelled, None));
        samples.push(run("report", RunEnd::Cancelled, None));
        samples.push(run("report", RunEnd::Expired, None));
        let stats = kind_stats(&samples, 10);
        assert_eq!(stats.len(), 2);
        let email = &stats[0];
        assert_eq!((email.runs, email.failed, email.cancelled), (102, 2, 1));
        assert!((email.runs_per_minute - 10.2).abs() < 1e-9);
        assert!((email.failure_rate - 2.0 / 102.0).abs() < 1e-9);
        // 102 timed runs: the 51st and the 97th by nearest rank.
        assert_eq!((email.p50_ms, email.p95_ms), (Some(51), Some(97)));
        let report = &stats[1];
        assert_eq!((report.runs, report.cancelled, report.expired), (0, 1, 1));
        assert_eq!((report.failure_rate, report.p50_ms), (0.0, None));
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7], 0.95), Some(7));
        assert_eq!(quantile(&[1, 2, 3, 4], 0.5), Some(2));
        assert_eq!(quantile(&[1, 2, 3, 4], 0.95), Some(4));
    }
}
