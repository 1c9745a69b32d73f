//! The ceiling: the bare SQL a queue cannot do without, run by the backend on the same database
//! (`sked_store::bench`), shaped as `drain` and `enqueue` run sked.

use serde_json::json;
use sked::store::bench::{Bench, CeilingParams, CeilingWorkload};

use crate::{CliError, CliResult};

use super::{CLAIM_BATCH, DRAIN_WORKERS, round};

/// A read snapshot held open on a connection of its own until released.
pub(super) async fn hold_snapshot(
    bench: &dyn Bench,
) -> CliResult<Box<dyn sked::store::bench::HeldSnapshot>> {
    bench.hold_snapshot().await.map_err(CliError::runtime)
}

/// Rows a second of one ceiling run.
pub(super) async fn ceiling_per_s(
    bench: &dyn Bench,
    workload: CeilingWorkload,
    n: usize,
    batch: usize,
    clients: usize,
) -> CliResult<f64> {
    let report = bench
        .ceiling(CeilingParams {
            workload,
            n,
            batch,
            clients,
        })
        .await
        .map_err(CliError::runtime)?;
    if report.rows != n {
        return Err(CliError::runtime(format!(
            "the ceiling handled {} rows, expected {n}",
            report.rows
        )));
    }
    Ok(report.per_s())
}

/// The ceilings: the drain as `drain` runs (claims of [`CLAIM_BATCH`], its default workers),
/// with its rows deleted and with their outcomes kept, and the insert as `enqueue` runs
/// (`batch` rows per transaction, `parallel` connections).
pub(super) async fn ceiling(
    bench: &dyn Bench,
    n: usize,
    batch: usize,
    parallel: usize,
) -> CliResult<serde_json::Value> {
    let drain = ceiling_per_s(bench, CeilingWorkload::Drain, n, CLAIM_BATCH, DRAIN_WORKERS).await?;
    let kept = ceiling_per_s(
        bench,
        CeilingWorkload::DrainKept,
        n,
        CLAIM_BATCH,
        DRAIN_WORKERS,
    )
    .await?;
    let insert = ceiling_per_s(bench, CeilingWorkload::Insert, n, batch, parallel).await?;
    Ok(json!({
        "workload": "ceiling",
        "drain_per_s": round(drain), "drain_batch": CLAIM_BATCH, "drain_clients": DRAIN_WORKERS,
        "drain_kept_per_s": round(kept),
        "insert_per_s": round(insert), "insert_batch": batch, "insert_clients": parallel,
    }))
}
