//! Handlers: the user's code for one kind of task. A typed handler gets the payload
//! deserialised into its own type; what it returns (or how it fails) becomes the attempt's
//! [`Ending`].

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sked_core::Task;
use tokio::sync::watch;

use crate::api::worker::Ending;
use crate::executors::{ExecResult, Executor};

/// What a handler gives back: `Ok(output)` (stored as the task's result unless it is `()`),
/// or a [`TaskError`].
pub type HandlerResult<T = ()> = Result<T, TaskError>;

/// How a handler says its attempt did not succeed. Any error type converts into a retryable
/// failure with `?`.
pub struct TaskError(Failure);

enum Failure {
    Retry(String),
    Fatal(String),
    Snooze(Duration),
    Cancelled,
}

impl TaskError {
    /// A failure worth retrying (with backoff, while attempts remain).
    pub fn retry(message: impl std::fmt::Display) -> TaskError {
        TaskError(Failure::Retry(message.to_string()))
    }

    /// A failure that retrying will not fix: the task is dead at once.
    pub fn fatal(message: impl std::fmt::Display) -> TaskError {
        TaskError(Failure::Fatal(message.to_string()))
    }

    /// Run again after `delay`, without spending an attempt.
    pub fn snooze(delay: Duration) -> TaskError {
        TaskError(Failure::Snooze(delay))
    }

    /// The handler stopped because cancellation was asked ([`TaskContext::cancelled`]).
    pub fn cancelled() -> TaskError {
        TaskError(Failure::Cancelled)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for TaskError {
    fn from(e: E) -> TaskError {
        TaskError::retry(crate::error::with_causes(&e))
    }
}

impl std::fmt::Debug for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Failure::Retry(m) => write!(f, "retry: {m}"),
            Failure::Fatal(m) => write!(f, "fatal: {m}"),
            Failure::Snooze(d) => write!(f, "snooze {d:?}"),
            Failure::Cancelled => write!(f, "cancelled"),
        }
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl From<TaskError> for Ending {
    fn from(e: TaskError) -> Ending {
        match e.0 {
            Failure::Retry(error) => Ending::Failed {
                error,
                retryable: true,
            },
            Failure::Fatal(error) => Ending::Failed {
                error,
                retryable: false,
            },
            Failure::Snooze(d) => Ending::Snoozed(
                SignedDuration::try_from(d).unwrap_or(SignedDuration::from_hours(24 * 365)),
            ),
            Failure::Cancelled => Ending::Cancelled,
        }
    }
}

/// The progress a handler last reported, shared with the heartbeat that sends it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Progress(Arc<std::sync::Mutex<Option<serde_json::Value>>>);

impl Progress {
    pub(crate) fn latest(&self) -> Option<serde_json::Value> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What a handler knows about the attempt it runs.
#[derive(Clone, Debug)]
pub struct TaskContext {
    task: Arc<Task>,
    cancel: watch::Receiver<bool>,
    progress: Progress,
}

impl TaskContext {
    pub(crate) fn new(
        task: Arc<Task>,
        cancel: watch::Receiver<bool>,
        progress: Progress,
    ) -> TaskContext {
        TaskContext {
            task,
            cancel,
            progress,
        }
    }

    /// Reports how far this attempt has come: a number from 0 to 100, or a small JSON object
    /// (at most 4 KiB; its `percent`, if any, from 0 to 100). The next heartbeat carries the
    /// latest to sked, where the task shows it. A value that is not a progress is refused.
    pub fn progress(&self, progress: serde_json::Value) -> Result<(), sked_core::SpecError> {
        sked_core::check_progress(&progress)?;
        *self.progress.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(progress);
        Ok(())
    }

    /// The task as claimed (id, attempt, queue, payload, …).
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The task's id.
    pub fn id(&self) -> sked_core::TaskId {
        self.task.id
    }

    /// The W3C trace context this attempt runs in (`traceparent`): its run's span when the
    /// worker records spans, else the one its task carries. Pass it on to continue the trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.task.traceparent.as_deref()
    }

    /// This attempt's number (1 for the first).
    pub fn attempt(&self) -> i32 {
        self.task.attempt
    }

    /// Whether cancellation of this task was asked.
    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Resolves when cancellation of this task is asked (seen at the next heartbeat). A
    /// handler that does not stop within the worker's cancel grace is dropped.
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        if rx.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Typed handler for one kind of task, registered with [`super::Worker::handler`]. For a
/// closure, use [`super::Worker::handle`].
pub trait Handler: Send + Sync + 'static {
    /// The payload, deserialised from the task's JSON.
    type Payload: DeserializeOwned + Send + 'static;
    /// Stored as the task's result (`()` stores none).
    type Output: Serialize + Send + 'static;

    /// Runs one attempt.
    fn handle(
        &self,
        ctx: TaskContext,
        payload: Self::Payload,
    ) -> impl Future<Output = HandlerResult<Self::Output>> + Send;
}

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A handler with its types erased, as the worker keeps it.
pub(crate) trait Erased: Send + Sync + 'static {
    fn call(&self, ctx: TaskContext) -> BoxFuture<Ending>;
}

pub(crate) struct Typed<H>(pub(crate) Arc<H>);

impl<H: Handler> Erased for Typed<H> {
    fn call(&self, ctx: TaskContext) -> BoxFuture<Ending> {
        let handler = self.0.clone();
        Box::pin(async move {
            // Read from the task's own payload: no copy of it.
            let payload = match H::Payload::deserialize(&ctx.task.payload) {
                Ok(p) => p,
                Err(e) => {
                    // Retrying cannot make the payload fit.
                    return Ending::Failed {
                        error: format!("the payload does not fit kind {:?}: {e}", ctx.task.kind),
                        retryable: false,
                    };
                }
            };
            match handler.handle(ctx, payload).await {
                Ok(out) => match serde_json::to_value(out) {
                    Ok(serde_json::Value::Null) => Ending::Succeeded(None),
                    Ok(v) => Ending::Succeeded(Some(v)),
                    Err(e) => Ending::Failed {
                        error: format!("the handler's output is not JSON: {e}"),
                        retryable: false,
                    },
                },
                Err(e) => e.into(),
            }
        })
    }
}

/// A closure as a [`Handler`].
pub(crate) struct FnHandler<F, P> {
    f: F,
    _payload: PhantomData<fn(P)>,
}

impl<F, P> FnHandler<F, P> {
    pub(crate) fn new(f: F) -> FnHandler<F, P> {
        FnHandler {
            f,
            _payload: PhantomData,
        }
    }
}

impl<F, P, Fut, O> Handler for FnHandler<F, P>
where
    F: Fn(TaskContext, P) -> Fut + Send + Sync + 'static,
    P: DeserializeOwned + Send + 'static,
    Fut: Future<Output = HandlerResult<O>> + Send + 'static,
    O: Serialize + Send + 'static,
{
    type Payload = P;
    type Output = O;

    fn handle(
        &self,
        ctx: TaskContext,
        payload: P,
    ) -> impl Future<Output = HandlerResult<O>> + Send {
        (self.f)(ctx, payload)
    }
}

/// A built-in [`Executor`] (which reads the raw task) as a handler.
pub(crate) struct ExecutorHandler(pub(crate) Arc<dyn Executor>);

impl Erased for ExecutorHandler {
    fn call(&self, ctx: TaskContext) -> BoxFuture<Ending> {
        let exec = self.0.clone();
        Box::pin(async move {
            // An executor cannot look at the context: it is stopped (dropped, which kills a
            // shell child) as soon as cancellation is asked.
            let result = tokio::select! {
                r = exec.run(&ctx.task) => r,
                _ = ctx.cancelled() => return Ending::Cancelled,
            };
            match result {
                ExecResult::Success(r) => Ending::Succeeded(r),
                ExecResult::Failure { error, retryable } => Ending::Failed { error, retryable },
                ExecResult::Snooze(d) => Ending::Snoozed(d),
            }
        })
    }
}
