//! Spans of an embedded node: an enqueue made inside the caller's span continues its trace,
//! the claim and the run are children of the enqueue, and the handler runs inside the run's
//! span (what it starts is the run's child, and its context names the run).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{Span as _, SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use sked::worker::{HandlerResult, TaskContext, Worker};
use sked::{Engine, EngineConfig, NewTask, TaskState, Telemetry};

/// The span a handler ran in, and the traceparent its context gave.
type Seen = (SpanId, Option<String>);

/// A tracer provider whose spans are kept in memory, and where they are.
fn recorded() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (provider, exporter)
}

/// An engine on a SQLite file in `dir`.
fn engine(dir: &tempfile::TempDir, config: EngineConfig) -> Engine {
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    Engine::new(store, config)
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} span in {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_runs_inside_the_run_span_of_a_task_enqueued_in_the_callers_trace() {
    let (provider, exporter) = recorded();
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig::default().telemetry(Telemetry::new(provider.tracer("sked")));
    let engine = engine(&dir, config);

    let app = provider.tracer("app");
    let request = app.start("request");
    let caller = Context::current_with_span(request);
    let id = engine
        .enqueue(NewTask::new("job"))
        .with_context(caller.clone())
        .await
        .unwrap()
        .id;
    caller.span().end();

    // What the handler sees: its context's span and traceparent; it starts a span of its own.
    let seen: Arc<Mutex<Option<Seen>>> = Arc::default();
    let record = seen.clone();
    let inner_tracer = provider.tracer("handler");
    let worker = Worker::new(engine.clone()).id("w").handle(
        "job",
        move |ctx: TaskContext, _: serde_json::Value| {
            let record = record.clone();
            let inner_tracer = inner_tracer.clone();
            async move {
                let current = Context::current().span().span_context().span_id();
                *record.lock().unwrap() = Some((current, ctx.traceparent().map(str::to_string)));
                let mut inner = inner_tracer.start("inner");
                inner.set_attribute(KeyValue::new("step", "send"));
                inner.end();
                HandlerResult::Ok(())
            }
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    let started = std::time::Instant::now();
    while engine.task(id).await.unwrap().state != TaskState::Succeeded {
        assert!(started.elapsed() < Duration::from_secs(15), "the task ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop.send(());
    running.await.unwrap().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let request = named(&spans, "request");
    let (enqueue, claim, run, inner) = (
        named(&spans, "sked.enqueue"),
        named(&spans, "sked.claim"),
        named(&spans, "sked.run job"),
        named(&spans, "inner"),
    );
    let trace = request.span_context.trace_id();
    for s in [enqueue, claim, run, inner] {
        assert_eq!(
            s.span_context.trace_id(),
            trace,
            "{} is in the caller's trace",
            s.name
        );
    }
    assert_eq!(enqueue.parent_span_id, request.span_context.span_id());
    assert_eq!(claim.parent_span_id, enqueue.span_context.span_id());
    assert_eq!(run.parent_span_id, enqueue.span_context.span_id());
    assert_eq!(
        inner.parent_span_id,
        run.span_context.span_id(),
        "the handler ran inside the run"
    );
    assert!(enqueue.start_time <= claim.start_time && claim.start_time <= run.start_time);
    let (current, traceparent) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(current, run.span_context.span_id());
    assert_eq!(
        traceparent.unwrap(),
        format!("00-{}-{}-01", trace, run.span_context.span_id())
    );
    assert_eq!(
        engine.task(id).await.unwrap().traceparent.unwrap(),
        format!("00-{}-{}-01", trace, enqueue.span_context.span_id()),
        "the stored context is the enqueue's"
    );
}

#[tokio::test]
async fn without_a_tracer_an_enqueue_still_takes_the_callers_context() {
    let (provider, exporter) = recorded();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(&dir, EngineConfig::default());
    let caller = Context::current_with_span(provider.tracer("app").start("request"));
    let sc = caller.span().span_context().clone();
    let id = engine
        .enqueue(NewTask::new("job"))
        .with_context(caller.clone())
        .await
        .unwrap()
        .id;
    let given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let kept = engine
        .enqueue(NewTask::new("job").traceparent(given))
        .with_context(caller)
        .await
        .unwrap()
        .id;
    assert_eq!(
        engine.task(id).await.unwrap().traceparent.unwrap(),
        format!("00-{}-{}-01", sc.trace_id(), sc.span_id())
    );
    assert_eq!(engine.task(kept).await.unwrap().traceparent.unwrap(), given);
    assert!(
        exporter
            .get_finished_spans()
            .unwrap()
            .iter()
            .all(|s| !s.name.starts_with("sked.")),
        "no spans of sked's own"
    );
}
