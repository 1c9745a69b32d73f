//! Leader-only duties. Every node runs [`run`]; the one holding the `leader` lease
//! materialises schedules, rescues expired leases and prunes old tasks. A node that cannot
//! renew its lease stops these duties before the lease can expire and be taken over.

use std::time::Duration;

use jiff::SignedDuration;
use sked_store::LeaseAcquireParams;
use tokio::sync::watch;

use crate::Engine;

pub const LEADER_LEASE: &str = "leader";

/// How often the pruner runs.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Runs until `shutdown` turns true; releases the lease on the way out.
pub async fn run(engine: Engine, mut shutdown: watch::Receiver<bool>) {
    let cfg = engine.config().clone();
    let renew_every = to_std(cfg.leader_ttl / 3);
    let mut leader_until: Option<tokio::time::Instant> = None;
    let mut next_rescue = tokio::time::Instant::now();
    let mut next_prune = tokio::time::Instant::now();
    let mut next_renew = tokio::time::Instant::now();
    loop {
        if *shutdown.borrow() {
            break;
        }
        // Listen before working, so a change during the pass is not missed.
        let changed = engine.schedules_changed().notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if tokio::time::Instant::now() >= next_renew {
            let started = tokio::time::Instant::now();
            match engine
                .store()
                .lease_acquire(LeaseAcquireParams {
                    name: LEADER_LEASE.into(),
                    holder: cfg.node_id.clone(),
                    ttl: cfg.leader_ttl,
                    now: engine.now(),
                })
                .await
            {
                Ok(Some(_)) => {
                    if leader_until.is_none() {
                        tracing::info!(node = %cfg.node_id, "became leader");
                    }
                    // Count the lease from before the request, and stop a third of a TTL
                    // early, so the duties end before anyone else can take over.
                    leader_until = Some(started + to_std(cfg.leader_ttl * 2 / 3));
                }
                Ok(None) => {
                    if leader_until.take().is_some() {
                        tracing::warn!(node = %cfg.node_id, "lost leadership");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the leader lease"),
            }
            next_renew = tokio::time::Instant::now() + renew_every;
        }
        let leader = leader_until.is_some_and(|until| tokio::time::Instant::now() < until);
        let mut wake_at = next_renew;
        if leader {
            if let Err(e) = engine.materialise().await {
                tracing::warn!(error = %e, "materialising schedules failed");
            }
            if tokio::time::Instant::now() >= next_rescue {
                if let Err(e) = engine.rescue().await {
                    tracing::warn!(error = %e, "rescue failed");
                }
                next_rescue = tokio::time::Instant::now() + to_std(cfg.rescue_interval);
            }
            if tokio::time::Instant::now() >= next_prune {
                match engine.prune().await {
                    Ok(n) if n > 0 => tracing::info!(count = n, "pruned finished tasks"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "pruning failed"),
                }
                next_prune = tokio::time::Instant::now() + PRUNE_EVERY;
            }
            wake_at = wake_at.min(next_rescue).min(next_prune);
            if let Ok(Some(next_fire)) = engine.store().schedule_next_fire_at().await {
                let wait = to_std(next_fire.duration_since(engine.now()));
                wake_at = wake_at.min(tokio::time::Instant::now() + wait);
            }
            if let Some(until) = leader_until {
                wake_at = wake_at.min(until);
            }
        }
        tokio::select! {
            _ = &mut changed, if leader => {}
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = shutdown.changed() => {}
        }
    }
    if leader_until.is_some() {
        let _ = engine
            .store()
            .lease_release(LEADER_LEASE, &cfg.node_id)
            .await;
    }
}

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}
