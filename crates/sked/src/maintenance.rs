//! Leader-only duties. Every node runs [`run`]; the one holding the `leader` lease
//! materialises schedules, rescues expired leases and prunes old tasks.
//!
//! - The leader renews its lease every third of its TTL. It counts its leadership from before
//!   each renewal request, on its own monotonic clock, and stops a third of a TTL early: a node
//!   that cannot renew stops its duties before its lease can expire and be taken over.
//! - A follower sleeps until the current lease expires (or is given up, when the store
//!   announces it) and then tries to take it, so a dead leader is replaced within its TTL.
//! - Leaders overlapping anyway (a stalled process, say) cannot run an occurrence twice: the
//!   store applies each materialisation plan at most once (a unique key per occurrence).
//! - Idle, a node asks the store only when something is due; see `BENCHMARKS.md`.

use std::time::Duration;

use jiff::SignedDuration;
use sked_store::LeaseAcquireParams;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Engine;

pub const LEADER_LEASE: &str = "leader";

/// How often the pruner runs.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// How often schedules are looked at with nothing announced, in case a change was missed.
const SCHEDULES_ANNOUNCED: Duration = Duration::from_secs(30);
const SCHEDULES_UNANNOUNCED: Duration = Duration::from_secs(5);

/// Runs until `shutdown` turns true; releases the lease on the way out.
pub async fn run(engine: Engine, mut shutdown: watch::Receiver<bool>) {
    let cfg = engine.config().clone();
    let renew_every = to_std(cfg.leader_ttl / 3);
    let mut leader_until: Option<Instant> = None;
    let mut next_try = Instant::now();
    let mut next_rescue = Instant::now();
    let mut next_prune = Instant::now();
    // When schedules must be looked at: now (just became leader, or told of a change), at the
    // next fire time, or at the latest after the safety interval.
    let mut next_schedules = Instant::now();
    let mut presence = crate::Presence {
        id: cfg.node_id.clone(),
        role: "node".into(),
        ..crate::Presence::default()
    };
    loop {
        if *shutdown.borrow() {
            break;
        }
        // This node's sign of life, for the dashboard's list of nodes (written every minute).
        engine.seen(&presence.id, || presence.clone()).await;
        // Listen before working, so a change during the pass is not missed.
        let schedules_changed = engine.schedules_changed().notified();
        let leases_changed = engine.leases_changed().notified();
        tokio::pin!(schedules_changed, leases_changed);
        schedules_changed.as_mut().enable();
        leases_changed.as_mut().enable();
        if Instant::now() >= next_try {
            let started = Instant::now();
            let acquired = engine
                .store()
                .lease_acquire(LeaseAcquireParams {
                    name: LEADER_LEASE.into(),
                    holder: cfg.node_id.clone(),
                    ttl: cfg.leader_ttl,
                    now: engine.now(),
                })
                .await;
            next_try = Instant::now() + renew_every;
            match acquired {
                Ok(Some(lease)) => {
                    if leader_until.is_none() {
                        tracing::info!(node = %cfg.node_id, token = lease.token, "became leader");
                        next_schedules = Instant::now();
                    }
                    leader_until = Some(started + to_std(cfg.leader_ttl * 2 / 3));
                }
                Ok(None) => {
                    if leader_until.take().is_some() {
                        tracing::warn!(node = %cfg.node_id, "lost leadership");
                    }
                    // Try again just after the holder's lease runs out, unless it renews.
                    if let Ok(Some(held)) =
                        engine.store().lease_get(LEADER_LEASE, engine.now()).await
                    {
                        let left = to_std(held.expires_at.duration_since(engine.now()));
                        next_try = Instant::now() + left + Duration::from_millis(5);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot reach the leader lease"),
            }
        }
        let leader = leader_until.is_some_and(|until| Instant::now() < until);
        if !leader && leader_until.take().is_some() {
            tracing::warn!(node = %cfg.node_id, "could not renew leadership in time; duties stopped");
        }
        engine.set_leader(leader);
        let mut wake_at = next_try.min(Instant::now() + crate::BEAT_EVERY);
        if leader {
            if Instant::now() >= next_schedules {
                next_schedules = materialise(&engine).await;
            }
            if Instant::now() >= next_rescue {
                if let Err(e) = engine.rescue().await {
                    tracing::warn!(error = %e, "rescue failed");
                }
                next_rescue = Instant::now() + to_std(cfg.rescue_interval);
            }
            if Instant::now() >= next_prune {
                match engine.prune().await {
                    Ok(n) if n > 0 => tracing::info!(count = n, "pruned finished tasks"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "pruning failed"),
                }
                next_prune = Instant::now() + PRUNE_EVERY;
            }
            wake_at = wake_at.min(next_rescue).min(next_prune);
            wake_at = wake_at.min(next_schedules);
            if let Some(until) = leader_until {
                wake_at = wake_at.min(until);
            }
        }
        tokio::select! {
            _ = &mut schedules_changed, if leader => next_schedules = Instant::now(),
            _ = &mut leases_changed, if !leader => next_try = Instant::now(),
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = shutdown.changed() => {}
        }
    }
    engine.set_leader(false);
    presence.stopping = true;
    engine.beat(&presence).await;
    if leader_until.is_some() {
        let _ = engine
            .store()
            .lease_release(LEADER_LEASE, &cfg.node_id)
            .await;
    }
}

/// One materialisation pass; returns when schedules need looking at next.
async fn materialise(engine: &Engine) -> Instant {
    let safety = if engine.announced() {
        SCHEDULES_ANNOUNCED
    } else {
        SCHEDULES_UNANNOUNCED
    };
    let mut next = Instant::now() + safety;
    if let Err(e) = engine.materialise().await {
        tracing::warn!(error = %e, "materialising schedules failed");
        return Instant::now() + Duration::from_secs(1);
    }
    match engine.store().schedule_next_fire_at().await {
        Ok(Some(fire)) => {
            next = next.min(Instant::now() + to_std(fire.duration_since(engine.now())))
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the next fire time");
            next = Instant::now() + Duration::from_secs(1);
        }
    }
    next
}

fn to_std(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}
