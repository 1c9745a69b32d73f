//! Time agreed between nodes. Nodes that share a database take their time from the database
//! server's clock: each measures its offset to it at start and every [`RESYNC_EVERY`] after,
//! and reads "now" as its own clock plus that offset. Leases, run times, fire times and
//! backoffs then agree across nodes, however skewed their own clocks are.
//!
//! A measurement reads the database's clock [`READINGS`] times and keeps the reading with the
//! shortest round trip, as NTP's clock filter does: the server read its clock somewhere within
//! that round trip, so the offset is off by at most half of it. A single reading is not
//! enough: a node's first one also prepares the statement (one more round trip before the
//! server reads its clock), and any one may wait for a pooled connection or for a busy
//! machine to run it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use sked_core::Clock;
use sked_store::Store;

use crate::Result;

/// How often the offset is measured again.
pub(crate) const RESYNC_EVERY: Duration = Duration::from_secs(30);

/// How many readings of the database's clock one measurement takes.
const READINGS: usize = 5;

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
        let Some(reading) = measure(self.local.as_ref(), || store.server_time()).await? else {
            return Ok(false);
        };
        self.offset_us
            .store(reading.offset.as_micros() as i64, Ordering::Relaxed);
        tracing::debug!(offset = %reading.offset, round_trip = ?reading.round_trip, "measured the offset to the database clock");
        Ok(true)
    }
}

/// One reading of the database's clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// The database's clock minus the local one.
    offset: SignedDuration,
    /// How long the reading took: the offset is off by at most half of it.
    round_trip: Duration,
}

/// The offset of the clock `read` returns to `local`, from the one of [`READINGS`] readings
/// with the shortest round trip. `Ok(None)` when `read` has no clock to give.
async fn measure<F, Fut, E>(local: &dyn Clock, mut read: F) -> Result<Option<Reading>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<Timestamp>, E>>,
{
    let mut best: Option<Reading> = None;
    for _ in 0..READINGS {
        let sent = Instant::now();
        let local_sent = local.now();
        let Some(server) = read().await? else {
            return Ok(None);
        };
        let round_trip = sent.elapsed();
        // Taken as read halfway through the round trip.
        let local_mid = local_sent.checked_add(round_trip / 2).unwrap_or(local_sent);
        let reading = Reading {
            offset: server.duration_since(local_mid),
            round_trip,
        };
        if best.is_none_or(|b| reading.round_trip < b.round_trip) {
            best = Some(reading);
        }
    }
    Ok(best)
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

#[cfg(test)]
mod tests {
    use super::*;
    use sked_core::SystemClock;

    /// A database clock ten seconds ahead whose first reading is slow and read at its very end,
    /// as a first query that opens a connection and prepares its statement is.
    #[tokio::test]
    async fn a_slow_first_reading_does_not_skew_the_offset() {
        let ahead = SignedDuration::from_secs(10);
        let mut first = true;
        let reading = measure(&SystemClock, || {
            let slow = std::mem::take(&mut first);
            async move {
                if slow {
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                }
                Ok::<_, ()>(Some(Timestamp::now() + ahead))
            }
        })
        .await
        .unwrap()
        .unwrap();
        // The slow reading alone would be 500 ms off.
        let error = (reading.offset - ahead).abs();
        assert!(
            error < SignedDuration::from_millis(100),
            "offset {} is {error} off",
            reading.offset
        );
        assert!(reading.round_trip < Duration::from_millis(1000));
    }

    #[tokio::test]
    async fn a_store_without_a_clock_gives_none() {
        let reading = measure(&SystemClock, || async { Ok::<_, ()>(None) })
            .await
            .unwrap();
        assert!(reading.is_none());
    }
}
