//! OpenTelemetry spans of a task's life, linked by the W3C trace context (`traceparent`) stored
//! with the task: `sked.enqueue` (a child of the caller's span), then `sked.claim` and
//! `sked.run`, both children of the enqueue span. The engine and the worker take a
//! [`Telemetry`]; without a tracer nothing is recorded, and a task still carries the trace
//! context it was given, which the executors and remote workers pass on.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue, global::BoxedTracer};
use sked_core::{NewTask, Task};

use crate::api::worker::Ending;

/// Where sked's spans go: off (the default) or a tracer. Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry {
    tracer: Option<Arc<BoxedTracer>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_on() {
            "Telemetry(on)"
        } else {
            "Telemetry(off)"
        })
    }
}

/// The instrumentation scope of sked's spans.
pub const SCOPE: &str = "sked";

impl Telemetry {
    /// No spans (a task's trace context is still stored and passed on).
    pub fn off() -> Telemetry {
        Telemetry::default()
    }

    /// Spans from this tracer: `provider.tracer(sked::telemetry::SCOPE)` of an SDK tracer
    /// provider, say.
    pub fn new<T>(tracer: T) -> Telemetry
    where
        T: Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        Telemetry {
            tracer: Some(Arc::new(BoxedTracer::new(Box::new(tracer)))),
        }
    }

    /// Spans from the tracer provider installed globally
    /// (`opentelemetry::global::set_tracer_provider`).
    pub fn global() -> Telemetry {
        Telemetry {
            tracer: Some(Arc::new(opentelemetry::global::tracer(SCOPE))),
        }
    }

    /// Whether spans are recorded.
    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    /// Starts the enqueue spans of `tasks`: one per distinct trace context they continue (a
    /// task that gives none continues the caller's current span, if any). Each task then
    /// carries its enqueue span's context. Off, a task without a context takes the caller's.
    pub(crate) fn enqueue<'a>(&self, tasks: impl IntoIterator<Item = &'a mut NewTask>) -> Spans {
        let Some(tracer) = &self.tracer else {
            continue_current(tasks);
            return Spans(Vec::new());
        };
        // Per distinct parent: the parent, the enqueue span, the span's own traceparent.
        let mut spans: Vec<(Option<String>, Context, Option<String>)> = Vec::new();
        for t in tasks {
            let i = match spans.iter().position(|(p, ..)| *p == t.traceparent) {
                Some(i) => i,
                None => {
                    let parent = match &t.traceparent {
                        Some(tp) => context_of(tp),
                        None => Context::current(),
                    };
                    let span = tracer
                        .span_builder("sked.enqueue")
                        .with_kind(SpanKind::Producer)
                        .with_attributes([
                            KeyValue::new("sked.queue", t.queue.clone()),
                            KeyValue::new("sked.kind", t.kind.clone()),
                        ])
                        .start_with_context(tracer.as_ref(), &parent);
                    let cx = parent.with_span(span);
                    let own = traceparent_of(&cx);
                    spans.push((t.traceparent.clone(), cx, own));
                    spans.len() - 1
                }
            };
            if let Some(own) = &spans[i].2 {
                t.traceparent = Some(own.clone());
            }
        }
        Spans(spans.into_iter().map(|(_, cx, _)| cx).collect())
    }

    /// Records the claim of `tasks`, begun at `started`: a span per task that carries a trace
    /// context, a child of its enqueue span.
    pub(crate) fn claimed(&self, tasks: &[Task], started: SystemTime, worker: &str) {
        let Some(tracer) = &self.tracer else { return };
        for t in tasks {
            let Some(tp) = &t.traceparent else { continue };
            let parent = context_of(tp);
            let mut span = tracer
                .span_builder("sked.claim")
                .with_kind(SpanKind::Internal)
                .with_start_time(started)
                .with_attributes(task_attributes(t, worker))
                .start_with_context(tracer.as_ref(), &parent);
            opentelemetry::trace::Span::end(&mut span);
        }
    }

    /// Starts the span of a run of `task` (a child of its enqueue span, or a trace of its own
    /// when it carries none) and returns its context; the task then carries that context, so
    /// what its handler or executor starts is a child of the run.
    pub(crate) fn run(&self, task: &mut Task, worker: &str) -> Option<Context> {
        let tracer = self.tracer.as_ref()?;
        let parent = match &task.traceparent {
            Some(tp) => context_of(tp),
            None => Context::new(),
        };
        let span = tracer
            .span_builder(Cow::Owned(format!("sked.run {}", task.kind)))
            .with_kind(SpanKind::Consumer)
            .with_attributes(task_attributes(task, worker))
            .start_with_context(tracer.as_ref(), &parent);
        let cx = parent.with_span(span);
        if let Some(own) = traceparent_of(&cx) {
            task.traceparent = Some(own);
        }
        Some(cx)
    }
}

/// Gives the tasks without a trace context the caller's current span's, if there is one (the
/// remote client's enqueues, and the engine's when it records no spans).
pub(crate) fn continue_current<'a>(tasks: impl IntoIterator<Item = &'a mut NewTask>) {
    // The current context is read once, at the first task without one of its own.
    let mut current: Option<Option<String>> = None;
    for t in tasks {
        if t.traceparent.is_none() {
            t.traceparent = current
                .get_or_insert_with(|| traceparent_of(&Context::current()))
                .clone();
        }
    }
}

/// Ends a run's span with its ending as the status.
pub(crate) fn run_ended(cx: &Context, ending: &Ending) {
    let span = cx.span();
    let (outcome, status) = match ending {
        Ending::Succeeded(_) => ("succeeded", Status::Ok),
        Ending::Failed { error, retryable } => {
            span.set_attribute(KeyValue::new("sked.retryable", *retryable));
            ("failed", Status::error(error.clone()))
        }
        Ending::Snoozed(_) => ("snoozed", Status::Unset),
        Ending::Cancelled => ("cancelled", Status::error("cancelled")),
        Ending::Released => ("released", Status::Unset),
    };
    span.set_attribute(KeyValue::new("sked.outcome", outcome));
    span.set_status(status);
    span.end();
}

/// Enqueue spans, ended when the enqueue is answered.
#[must_use]
pub(crate) struct Spans(Vec<Context>);

impl Spans {
    /// Ends the spans, as failed when the enqueue failed.
    pub(crate) fn end<T, E: std::fmt::Display>(self, result: &Result<Vec<T>, E>) {
        for cx in self.0 {
            let span = cx.span();
            match result {
                Ok(done) => {
                    span.set_attribute(KeyValue::new("sked.tasks", done.len() as i64));
                }
                Err(e) => span.set_status(Status::error(e.to_string())),
            }
            span.end();
        }
    }
}

fn task_attributes(t: &Task, worker: &str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("sked.task.id", t.id),
        KeyValue::new("sked.queue", t.queue.clone()),
        KeyValue::new("sked.kind", t.kind.clone()),
        KeyValue::new("sked.attempt", i64::from(t.attempt)),
        KeyValue::new("sked.worker", worker.to_string()),
    ]
}

/// A context whose span is the remote one `traceparent` names (an empty context when it
/// does not parse; stored values always do).
pub fn context_of(traceparent: &str) -> Context {
    match sked_core::parse_traceparent(traceparent) {
        Some((trace, span, flags)) => Context::new().with_remote_span_context(SpanContext::new(
            trace.into(),
            span.into(),
            TraceFlags::new(flags),
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    }
}

/// The `traceparent` of a context's span, when it has a valid one.
pub fn traceparent_of(cx: &Context) -> Option<String> {
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| {
        sked_core::format_traceparent(
            u128::from_be_bytes(sc.trace_id().to_bytes()),
            u64::from_be_bytes(sc.span_id().to_bytes()),
            sc.trace_flags().to_u8(),
        )
    })
}
