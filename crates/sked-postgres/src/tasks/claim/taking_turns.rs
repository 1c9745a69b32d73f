//! Large claims of one store over the same queues and kinds take turns.
//!
//! Claims resume from their store's position in the claim index ([`super::positions`]). Two
//! large claims that start from the same position at once walk the same entries: each locks
//! what it reaches first and skips, one heap tuple at a time, every row the other holds, so
//! that both walk about twice the rows they take. Taking turns, the second starts where the
//! first ended and walks only its own. A small claim skips few rows that way and runs at
//! once: waiting for the claim before it would cost it more than the skipping.
//!
//! Claims of other stores (other nodes) still meet at the front of the index, as they would
//! anyway: `SKIP LOCKED` keeps them apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sked_store::{Result, StoreError, TaskClaimParams};
use tokio::sync::OwnedMutexGuard;

/// Claims of at least this many tasks take turns.
pub(crate) const TURNS_FROM: u32 = 100;

/// The turns of one store's claims, one line per set of queues and kinds.
#[derive(Debug, Default)]
pub(crate) struct ClaimTurns {
    lines: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ClaimTurns {
    /// Waits for the turn of the claim `p` if it is large enough to take one, failing at
    /// `deadline`; the turn lasts as long as the guard.
    pub(crate) async fn wait(
        &self,
        p: &TaskClaimParams,
        deadline: tokio::time::Instant,
    ) -> Result<Option<OwnedMutexGuard<()>>> {
        if p.max < TURNS_FROM {
            return Ok(None);
        }
        let key = super::positions::filter_key(p);
        match tokio::time::timeout_at(deadline, self.take(&key)).await {
            Ok(turn) => Ok(Some(turn)),
            Err(_) => Err(StoreError::Unavailable(
                "the claims before this one over the same queues did not end in time".into(),
            )),
        }
    }

    /// Waits for the turn of a claim over `filter` (its queues and kinds, as
    /// [`super::positions::filter_key`] spells them); the turn lasts as long as the guard.
    async fn take(&self, filter: &str) -> OwnedMutexGuard<()> {
        let line = {
            // Plain values only: a panic elsewhere cannot have left the map half-changed.
            let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
            lines.entry(filter.to_owned()).or_default().clone()
        };
        line.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn claims_over_the_same_queues_wait_for_each_other_and_others_do_not() {
        let turns = Arc::new(ClaimTurns::default());
        let first = turns.take("[\"a\"] []").await;
        // Another set of queues has a line of its own.
        let other = tokio::time::timeout(Duration::from_secs(5), turns.take("[\"b\"] []")).await;
        assert!(other.is_ok(), "a claim over other queues waited");
        let waiting = {
            let turns = turns.clone();
            tokio::spawn(async move { turns.take("[\"a\"] []").await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "a second claim over the same queues did not wait"
        );
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(
            matches!(second, Ok(Ok(_))),
            "the second claim never got its turn"
        );
    }
}
