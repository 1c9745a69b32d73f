//! Time agreed between nodes. Nodes that share a database take their time from the database
//! server's clock: each measures its offset to it (a round trip, halved, as NTP does) at start
//! and every [`RESYNC_EVERY`] after, and reads "now" as its own clock plus that offset. Leases,
//! fire times and backoffs then agree across nodes, however skewed their own clocks are.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use sked_core::Clock;
use sked_store::Store;

use crate::Result;

/// How often the offset is measured again.
pub(crate) const RESYNC_EVERY: Duration = Duration::from_secs(30);

/// A local clock corrected by a measured offset to the database server's clock.
#[derive(Debug)]
pub(crate) struct ServerClock {
    local: Arc<dyn Clock>,
    offset_us: AtomicI64,
}

impl Clock for ServerClock {
    fn now(&self) -> Timestamp {
        let offset = SignedDuration::from_micros(self.offset_us.load(Ordering::Relaxed));
        let local = self.local.now();
        local.checked_add(offset).unwrap_or(local)
    }
}

impl ServerClock {
    /// The offset in use: the server's clock minus the local one.
    pub(crate) fn offset(&self) -> SignedDuration {
        SignedDuration::from_micros(self.offset_us.load(Ordering::Relaxed))
    }

    /// Measures the offset once. `Ok(false)` when the store has no server clock.
    async fn sync(&self, store: &dyn Store) -> Result<bool> {
        let sent = Instant::now();
        let local_sent = self.local.now();
        let Some(server) = store.server_time().await? else {
            return Ok(false);
        };
        let round_trip = sent.elapsed();
        // The server read its clock about halfway through the round trip.
        let local_mid = local_sent.checked_add(round_trip / 2).unwrap_or(local_sent);
        let offset = server.duration_since(local_mid);
        self.offset_us
            .store(offset.as_micros() as i64, Ordering::Relaxed);
        tracing::debug!(offset = %offset, ?round_trip, "measured the offset to the database clock");
        Ok(true)
    }
}

/// The clock a node should use with `store`: `local` corrected to the database server's clock
/// when the store has one (kept in sync in the background), else `local` itself.
pub async fn node_clock(store: &Arc<dyn Store>, local: Arc<dyn Clock>) -> Result<Arc<dyn Clock>> {
    let clock = Arc::new(ServerClock {
        local: local.clone(),
        offset_us: AtomicI64::new(0),
    });
    if !clock.sync(store.as_ref()).await? {
        return Ok(local);
    }
    let offset = clock.offset();
    if offset.abs() > SignedDuration::from_secs(1) {
        tracing::warn!(%offset, "this node's clock differs from the database's; using the database's");
    }
    let (weak, store) = (Arc::downgrade(&clock), store.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RESYNC_EVERY).await;
            let Some(clock) = weak.upgrade() else { return };
            if let Err(e) = clock.sync(store.as_ref()).await {
                tracing::warn!(error = %e, "cannot read the database clock; keeping the last offset");
            }
        }
    });
    Ok(clock)
}
