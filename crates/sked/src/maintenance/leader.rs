//! The leader elector: takes and renews the `leader` lease, and says whether this node may do
//! the leader-only duties right now.
//!
//! - The leader renews its lease every third of its TTL. It counts its leadership from before
//!   each renewal request, on its own monotonic clock, and stops two thirds into the TTL: a
//!   node that cannot renew stops its duties before its lease can expire and be taken over.
//!   Its leadership is a deadline ([`Engine::is_leader`] turns false at it by itself), and a
//!   renewal that gets no answer is given up at that deadline, so a node cut off from its
//!   database (requests that hang rather than fail) steps down on time too.
//! - A follower sleeps until the current lease expires (or is given up, when the store
//!   announces it) and then tries to take it, so a dead leader is replaced within its TTL.
//!
//! Monotonic time is passed in (`mono`), like `now` to the store, so tests decide it.

use std::time::Duration;

use jiff::SignedDuration;
use sked_store::LeaseAcquireParams;
use tokio::time::Instant;

use super::to_std;
use crate::Engine;
pub use crate::engine::LEADER_LEASE;

/// Settings of the leader elector.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LeaderConfig {
    /// How long the leader lease lasts without renewal; renewed every third of it.
    pub ttl: SignedDuration,
}

impl Default for LeaderConfig {
    fn default() -> LeaderConfig {
        LeaderConfig {
            ttl: SignedDuration::from_secs(15),
        }
    }
}

/// One node's view of the leader lease.
#[derive(Debug)]
pub struct Elector {
    config: LeaderConfig,
    /// Until when this node may act as leader (`None`: it does not hold the lease).
    leader_until: Option<Instant>,
    /// When to try to take or renew the lease next.
    next_try: Instant,
}

impl Elector {
    /// An elector that tries at once.
    pub fn new(config: LeaderConfig, mono: Instant) -> Elector {
        Elector {
            config,
            leader_until: None,
            next_try: mono,
        }
    }

    /// Tries to take or renew the lease when it is time to (or `force`d: a lease was given
    /// up), and tells whether this node leads at `mono`. `became` is set when it just took
    /// the lease.
    pub async fn step(&mut self, engine: &Engine, mono: Instant) -> Step {
        let node = &engine.config().node_id;
        let mut became = false;
        if mono >= self.next_try {
            // A leader waits for the answer until its leadership ends; a follower, or a leader
            // whose leadership ended before it could ask (the lease may still be its own), a
            // TTL.
            let wait = match self.leader_until {
                Some(until) if until > mono => until - mono,
                _ => to_std(self.config.ttl),
            };
            let request = engine.store().lease_acquire(LeaseAcquireParams {
                name: LEADER_LEASE.into(),
                holder: node.clone(),
                ttl: self.config.ttl,
                now: engine.now(),
            });
            let acquired = tokio::time::timeout(wait, request)
                .await
                .unwrap_or_else(|_| {
                    Err(sked_store::StoreError::Unavailable(format!(
                        "no answer within {wait:?}"
                    )))
                });
            self.next_try = mono + to_std(self.config.ttl / 3);
            match acquired {
                Ok(Some(lease)) => {
                    if self.leader_until.is_none() {
                        tracing::info!(node = %node, token = lease.token, "became leader");
                        became = true;
                    }
                    // Counted from before the request: the lease runs at least this long.
                    self.leader_until = Some(mono + to_std(self.config.ttl * 2 / 3));
                }
                Ok(None) => {
                    if self.leader_until.take().is_some() {
                        tracing::warn!(node = %node, "lost leadership");
                    }
                    // Try again just after the holder's lease runs out, unless it renews.
                    if let Ok(Some(held)) =
                        engine.store().lease_get(LEADER_LEASE, engine.now()).await
                    {
                        let left = to_std(held.expires_at.duration_since(engine.now()));
                        self.next_try = mono + left + Duration::from_millis(5);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot reach the leader lease"),
            }
        }
        let leader = self.leader_until.is_some_and(|until| mono < until);
        if !leader && self.leader_until.take().is_some() {
            tracing::warn!(node = %node, "could not renew leadership in time; duties stopped");
        }
        engine.set_leader(self.leader_until.filter(|_| leader));
        Step {
            leader,
            became,
            next_try: self.next_try,
            leader_until: self.leader_until,
        }
    }

    /// Makes the next [`Elector::step`] try the lease at once (it was given up somewhere).
    pub fn try_now(&mut self, mono: Instant) {
        self.next_try = mono;
    }

    /// Gives the lease up, if this node holds it, so that another node takes over at once.
    pub async fn resign(&mut self, engine: &Engine) {
        engine.set_leader(None);
        if self.leader_until.take().is_some() {
            let _ = engine
                .store()
                .lease_release(LEADER_LEASE, &engine.config().node_id)
                .await;
        }
    }
}

/// What one [`Elector::step`] found.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// This node leads now.
    pub leader: bool,
    /// It just took the lease.
    pub became: bool,
    /// When the elector wants to run next.
    pub next_try: Instant,
    /// Until when it leads, without a renewal.
    pub leader_until: Option<Instant>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maintenance::test_env::Env;

    #[tokio::test]
    async fn one_leader_at_a_time_and_a_silent_one_is_replaced_after_its_ttl() {
        let env = Env::new();
        let (a, b) = (env.node("a"), env.node("b"));
        let config = LeaderConfig {
            ttl: SignedDuration::from_secs(3),
        };
        let t0 = Instant::now();
        let mut ea = Elector::new(config.clone(), t0);
        let mut eb = Elector::new(config, t0);

        let sa = ea.step(&a, t0).await;
        assert!(sa.leader && sa.became && a.is_leader());
        assert_eq!(
            sa.next_try,
            t0 + Duration::from_secs(1),
            "renews every third"
        );
        assert_eq!(
            sa.leader_until,
            Some(t0 + Duration::from_secs(2)),
            "duties stop two thirds into the lease unless renewed"
        );
        let sb = eb.step(&b, t0).await;
        assert!(!sb.leader && !b.is_leader());
        assert!(
            sb.next_try >= t0 + Duration::from_secs(3)
                && sb.next_try <= t0 + Duration::from_millis(3010),
            "the follower tries again just after the lease runs out"
        );

        // A renews in time: still the leader, and B still cannot take it.
        env.advance_secs(1);
        let t1 = t0 + Duration::from_secs(1);
        let sa = ea.step(&a, t1).await;
        assert!(sa.leader && !sa.became);
        assert_eq!(sa.leader_until, Some(t1 + Duration::from_secs(2)));

        // A's renewals stop getting through (a stalled process, a lost connection): it gives
        // its duties up by itself two thirds into the lease, before the lease can run out.
        ea.next_try = t1 + Duration::from_secs(60);
        assert!(ea.step(&a, t1 + Duration::from_millis(1999)).await.leader);
        let sa = ea.step(&a, t1 + Duration::from_secs(2)).await;
        assert!(!sa.leader && !a.is_leader(), "no duties past two thirds");

        // Once its lease has run out in the database, B takes over, and A knows it has lost.
        env.advance_secs(4);
        let t5 = t0 + Duration::from_secs(5);
        let sb = eb.step(&b, t5).await;
        assert!(sb.leader && sb.became && b.is_leader());
        ea.try_now(t5);
        let sa = ea.step(&a, t5).await;
        assert!(
            !sa.leader && !a.is_leader(),
            "the old leader lost the lease"
        );
    }

    /// A node whose renewals hang (its network is cut) is no longer the leader two thirds
    /// into the TTL, whether or not its elector runs again by then.
    #[tokio::test(start_paused = true)]
    async fn leadership_lapses_at_its_deadline_by_itself() {
        let env = Env::new();
        let a = env.node("a");
        let t0 = Instant::now();
        let mut ea = Elector::new(
            LeaderConfig {
                ttl: SignedDuration::from_secs(3),
            },
            t0,
        );
        assert!(ea.step(&a, t0).await.leader);
        tokio::time::advance(Duration::from_millis(1999) - t0.elapsed()).await;
        assert!(a.is_leader());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            !a.is_leader(),
            "no step ran, and still the leadership ended"
        );
    }

    #[tokio::test]
    async fn a_resigning_leader_lets_another_take_over_at_once() {
        let env = Env::new();
        let (a, b) = (env.node("a"), env.node("b"));
        let t0 = Instant::now();
        let mut ea = Elector::new(LeaderConfig::default(), t0);
        let mut eb = Elector::new(LeaderConfig::default(), t0);
        assert!(ea.step(&a, t0).await.leader);
        assert!(!eb.step(&b, t0).await.leader);
        ea.resign(&a).await;
        assert!(!a.is_leader());
        eb.try_now(t0);
        let sb = eb.step(&b, t0).await;
        assert!(sb.leader && sb.became, "no need to wait for the TTL");
        let held = b.store().lease_get(LEADER_LEASE, b.now()).await.unwrap();
        assert_eq!(held.map(|l| l.holder).as_deref(), Some("b"));
    }
}
