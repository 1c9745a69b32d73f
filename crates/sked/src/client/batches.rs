//! [`Client`]'s batch calls: open, close, read, list and wait for batches. Tasks join one with
//! [`sked_core::NewTask::batch`].

use std::time::Duration;

use sked_core::{BatchId, NewBatch};
use sked_store::BatchInfo;

use super::{Client, Inner};
use crate::Result;
use crate::api::BatchList;

impl Client {
    /// Opens a batch with its callbacks.
    pub async fn batch_open(&self, batch: &NewBatch) -> Result<BatchInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.batch_open(batch.clone()).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.post("/v1/batches", batch).await,
        }
    }

    /// Closes a batch: its callbacks are enqueued once its tasks have all ended.
    pub async fn batch_close(&self, id: BatchId) -> Result<BatchInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.batch_close(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                r.post(&format!("/v1/batches/{id}/close"), &serde_json::json!({}))
                    .await
            }
        }
    }

    /// A batch with its tasks counted by state.
    pub async fn batch(&self, id: BatchId) -> Result<BatchInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.batch(id).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.get(&format!("/v1/batches/{id}"), &[]).await,
        }
    }

    /// The batch once it is done (its callbacks enqueued), or as it is when `wait` has passed
    /// first. A server holds one request at most its `--max-wait` (60 s by default).
    pub async fn batch_wait(&self, id: BatchId, wait: Duration) -> Result<BatchInfo> {
        match &self.inner {
            Inner::Embedded(e) => e.batch_wait(id, wait).await,
            #[cfg(feature = "remote")]
            Inner::Remote(r) => r.wait(&format!("/v1/batches/{id}"), wait).await,
        }
    }

    /// A page of batches, newest first: at most `limit` (up to 1,000), with ids below `before`.
    pub async fn batches(&self, before: Option<BatchId>, limit: u32) -> Result<BatchList> {
        match &self.inner {
            Inner::Embedded(e) => {
                let page = e.batches(before, limit).await?;
                let next_before = page.items.last().filter(|_| page.more).map(|b| b.id);
                Ok(BatchList {
                    batches: page.items,
                    next_before,
                })
            }
            #[cfg(feature = "remote")]
            Inner::Remote(r) => {
                let mut query = vec![("limit", limit.to_string())];
                query.extend(before.map(|b| ("before", b.to_string())));
                r.get("/v1/batches", &query).await
            }
        }
    }
}
