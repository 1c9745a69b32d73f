//! Group commit for attempt endings: concurrent `finish` calls wait together for one
//! transaction, so a busy worker pool pays one durable commit per batch, not per task.

use std::sync::{Arc, OnceLock};

use sked_core::Task;
use sked_store::{Result, Store, StoreError, TaskFinishParams};
use tokio::sync::{mpsc, oneshot};

type Job = (TaskFinishParams, oneshot::Sender<Result<Task>>);

/// Most endings committed in one transaction.
const MAX_BATCH: usize = 1024;

#[derive(Debug)]
pub(crate) struct FinishBatcher {
    store: Arc<dyn Store>,
    tx: OnceLock<mpsc::UnboundedSender<Job>>,
}

impl FinishBatcher {
    pub(crate) fn new(store: Arc<dyn Store>) -> FinishBatcher {
        FinishBatcher {
            store,
            tx: OnceLock::new(),
        }
    }

    pub(crate) async fn finish(&self, params: TaskFinishParams) -> Result<Task> {
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run(self.store.clone(), rx));
            tx
        });
        let (reply, answer) = oneshot::channel();
        tx.send((params, reply))
            .map_err(|_| StoreError::Unavailable("the engine is shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the engine is shutting down".into()))?
    }
}

async fn run(store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<Job>) {
    let mut jobs: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
        let (params, replies): (Vec<_>, Vec<_>) = jobs.drain(..).unzip();
        match store.task_finish_many(params).await {
            Ok(results) => {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                let msg = e.to_string();
                let unavailable = e.kind() == sked_store::ErrorKind::Unavailable;
                for reply in replies {
                    let err = if unavailable {
                        StoreError::Unavailable(msg.clone())
                    } else {
                        StoreError::Backend(msg.clone())
                    };
                    let _ = reply.send(Err(err));
                }
            }
        }
    }
}
