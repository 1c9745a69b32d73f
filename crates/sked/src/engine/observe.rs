//! What an operator looks at: workers' and nodes' presence, ended work per minute, who leads
//! the cluster, and the Prometheus metrics.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sked_store::{
    ActivityBucket, ActivityParams, Page, WorkerBeatParams, WorkerInfo, WorkerListParams,
};

use super::{Engine, lock};
use crate::error::{Error, Result};

/// A worker's or node's presence is written at most this often; it counts as alive for
/// [`ALIVE_FOR`] after it was last seen (three beats, so a busy database does not make it
/// flicker). Once a minute keeps an idle node within its budget of one query a second: every
/// 30 s measured 1.14 transactions a second where 0.94 were before (BENCHMARKS.md, idle). A
/// worker that stops says goodbye at once; one that is killed shows as gone after 3 minutes.
pub(crate) const BEAT_EVERY: Duration = Duration::from_secs(60);

/// The name of the lease whose holder leads the cluster (the elector in
/// [`crate::maintenance`] takes and renews it; the cluster's view reads it).
pub const LEADER_LEASE: &str = "leader";

/// How long after it was last seen a worker or node counts as alive.
pub(crate) const ALIVE_FOR: SignedDuration = SignedDuration::from_secs(180);

/// What a worker or node tells about itself.
#[derive(Debug, Clone, Default)]
pub struct Presence {
    /// The worker's or node's id.
    pub id: String,
    /// `worker` or `node`.
    pub role: String,
    /// The queues it works (all when empty).
    pub queues: Vec<String>,
    /// How many tasks it runs at once.
    pub concurrency: Option<u32>,
    /// It is shutting down.
    pub stopping: bool,
}

impl Engine {
    /// The Prometheus text exposition of this engine's metrics, with the task counts read
    /// from the store now. Counters and histograms are this process's; the task counts are the
    /// whole database's, the same on every node.
    #[cfg(feature = "metrics")]
    pub async fn metrics_text(&self) -> Result<String> {
        let queues = self
            .queue_page(sked_store::QueueListParams {
                after: None,
                limit: crate::metrics::QUEUE_SERIES_MAX,
                count_limit: crate::metrics::COUNT_LIMIT,
                now: self.now(),
            })
            .await?;
        Ok(self.inner.metrics.render(&queues, self.is_leader()))
    }

    /// Records a worker's or node's presence (a worker sends one every minute).
    /// Presence is advisory: a failure to write it is logged, not returned.
    pub async fn beat(&self, p: &Presence) {
        lock(&self.inner.beats).insert(p.id.clone(), std::time::Instant::now());
        self.write_beat(p.clone()).await;
    }

    /// A sign of life seen in passing (a claim, a maintenance pass): written only when this
    /// engine has written none for the id in the last [`BEAT_EVERY`]. It leaves the
    /// concurrency a worker told as it was.
    pub(crate) async fn seen(&self, id: &str, presence: impl FnOnce() -> Presence) {
        let now = std::time::Instant::now();
        {
            let mut beats = lock(&self.inner.beats);
            if beats
                .get(id)
                .is_some_and(|last| now.duration_since(*last) < BEAT_EVERY)
            {
                return;
            }
            if beats.len() > 10_000 {
                beats.retain(|_, last| now.duration_since(*last) < BEAT_EVERY);
            }
            beats.insert(id.to_string(), now);
        }
        self.write_beat(presence()).await;
    }

    async fn write_beat(&self, p: Presence) {
        let params = WorkerBeatParams {
            id: p.id,
            role: p.role,
            queues: p.queues,
            concurrency: p.concurrency,
            stopping: p.stopping,
            now: self.now(),
        };
        if let Err(e) = self.inner.store.worker_beat(params).await {
            tracing::debug!(error = %e, "could not record a worker's presence");
        }
    }

    /// Workers and nodes seen in the last day, most recently seen first: at most `limit`
    /// (at most [`sked_store::rules::LIST_LIMIT_MAX`]).
    pub async fn worker_page(&self, limit: u32) -> Result<Page<WorkerInfo>> {
        let seen_since = self
            .now()
            .checked_sub(SignedDuration::from_hours(24))
            .unwrap_or(Timestamp::MIN);
        let limit = limit.clamp(1, sked_store::rules::LIST_LIMIT_MAX);
        let params = WorkerListParams { seen_since, limit };
        Ok(self.inner.store.worker_list(params).await?)
    }

    /// The [`sked_store::rules::LIST_LIMIT_MAX`] workers and nodes seen most recently in the
    /// last day, most recently seen first.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        Ok(self
            .worker_page(sked_store::rules::LIST_LIMIT_MAX)
            .await?
            .items)
    }

    /// Whether a worker or node counts as alive now.
    pub fn is_alive(&self, w: &WorkerInfo) -> bool {
        w.stopped_at.is_none()
            && self
                .now()
                .checked_sub(ALIVE_FOR)
                .is_ok_and(|cut| w.last_seen_at >= cut)
    }

    /// Figures per task kind over the last `minutes`: runs per minute, the share that failed,
    /// run times at the 50th and 95th percentile (of a sample when more ran than are read).
    pub async fn kind_stats(&self, minutes: u32) -> Result<crate::api::KindStatsList> {
        /// Ended tasks read, and as many failed attempts.
        const SAMPLE: u32 = 10_000;
        let since = self.now() - SignedDuration::from_secs(60 * i64::from(minutes.max(1)));
        let samples = self
            .inner
            .store
            .run_samples(sked_store::kinds::RunSamplesParams {
                since,
                limit: SAMPLE,
            })
            .await?;
        let failed = samples
            .iter()
            .filter(|s| s.end == sked_store::kinds::RunEnd::Failed)
            .count();
        Ok(crate::api::KindStatsList {
            minutes,
            sampled: failed >= SAMPLE as usize || samples.len() - failed >= SAMPLE as usize,
            kinds: sked_store::kinds::kind_stats(&samples, minutes),
        })
    }

    /// Ended work per minute over the last `minutes` minutes (the current one included),
    /// every minute present, oldest first.
    pub async fn activity(&self, minutes: u32) -> Result<Vec<ActivityBucket>> {
        let minute = SignedDuration::from_secs(60);
        let now = self.now();
        let this_minute = now.as_second().div_euclid(60) * 60;
        let since = Timestamp::from_second(this_minute - 60 * i64::from(minutes.max(1) - 1))
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let found = self
            .inner
            .store
            .activity(ActivityParams {
                since,
                bucket: minute,
            })
            .await?;
        let mut out: Vec<ActivityBucket> = (0..minutes.max(1))
            .map(|i| ActivityBucket {
                start: since + minute * i32::try_from(i).unwrap_or(0),
                ..ActivityBucket::default()
            })
            .collect();
        for b in found {
            if let Some(slot) = out.iter_mut().find(|o| o.start == b.start) {
                *slot = b;
            }
        }
        Ok(out)
    }

    /// This node, and the leader as the database has it.
    pub async fn cluster(&self) -> Result<crate::api::Cluster> {
        let lease = self.inner.store.lease_get(LEADER_LEASE, self.now()).await?;
        Ok(crate::api::Cluster {
            node: self.inner.config.node_id.clone(),
            leader_until: lease.as_ref().map(|l| l.expires_at),
            leader: lease.map(|l| l.holder),
            backend: self.inner.store.backend().to_string(),
        })
    }
}
