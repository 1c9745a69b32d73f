//! The claim probe: a look for the first claimable task from the front, beside the claims,
//! which catches what no announcement moved claim positions back for (see [`super::positions`]).

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::Pool;
use sked_store::*;

use super::positions::{ClaimPositions, Key};
use super::sql::{Candidates, OPEN, OPEN_PARTS};
use crate::codec::{col, db_err};
use crate::tasks::Param;

/// Looks for the first claimable task from the front of the claim index, apart from the
/// claims (with a snapshot held it walks every task claimed since), and hands it to
/// [`ClaimPositions::probed`]. A failure only delays the next probe. `open`: among the queues
/// that are neither paused nor limited (the claim's); otherwise among `p`'s queues (a walk of
/// one limited queue).
pub(super) async fn probe(
    pool: Pool,
    positions: Arc<ClaimPositions>,
    filter_key: String,
    seen: Option<Key>,
    p: TaskClaimParams,
    open: bool,
) {
    // Its cost is the walk: the time to get a connection does not count.
    let mut began = Instant::now();
    let first = async {
        let c = pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?;
        began = Instant::now();
        let mut params: Vec<Param<'_>> = Vec::new();
        let candidates = Candidates::of(&p.now, &p.queues, &p.kinds, &None, None, &mut params);
        let rows = format!(
            "SELECT priority, run_at, id FROM sked_tasks c WHERE {}",
            candidates.rows
        );
        // Open queues may have released parts of kept stages too: the first task of the first.
        let sql = match open {
            true => format!(
                "SELECT * FROM ( \
                   ({rows} AND {} ORDER BY priority DESC, run_at, id LIMIT 1) \
                   UNION ALL (SELECT priority, run_at, ids[taken + 1] FROM sked_stages s \
                     WHERE {} AND {} ORDER BY priority DESC, run_at, lower(span) LIMIT 1)) f \
                 ORDER BY 1 DESC, 2, 3 LIMIT 1",
                OPEN.as_str(),
                candidates.parts,
                OPEN_PARTS.as_str()
            ),
            false => format!("{rows} ORDER BY priority DESC, run_at, id LIMIT 1"),
        };
        let stmt = c.prepare_cached(&sql).await.map_err(db_err)?;
        let row = c.query_opt(&stmt, &params).await.map_err(db_err)?;
        row.map(|r| -> Result<Key> {
            Ok(Key {
                priority: col(&r, 0)?,
                run_at: col(&r, 1)?,
                id: col(&r, 2)?,
            })
        })
        .transpose()
    };
    let first = first.await.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "the claim probe failed");
        None
    });
    positions.probed(&filter_key, first, seen, p.now, began.elapsed());
}
