//! The wire types of `/v1/batches`.

use serde::{Deserialize, Serialize};
use sked_core::BatchId;
use sked_store::BatchInfo;

/// `GET /v1/batches`: batches, newest first, each with its tasks counted by state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchList {
    /// The batches, newest first.
    pub batches: Vec<BatchInfo>,
    /// When more batches follow: the `before` that asks for the next page.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub next_before: Option<BatchId>,
}
