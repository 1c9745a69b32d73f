//! Client packages in a trace: an application with OpenTelemetry's SDK enqueues through the
//! Python or TypeScript client inside a span of its own, a sked server with
//! `--otlp-endpoint` records the enqueue and the claim, and the client's worker runs the task
//! in a span that is the task's child and current in the handler. Every span arrives at the
//! test's OTLP receiver, from both processes.

use std::path::Path;
use std::process::Command;

use crate::client_packages::{copy_of, package, succeeded};
use crate::common::otlp_receiver::{Receiver, Span, one};

/// Checks the trace an application printed (`TRACE CALLER` on its first line, `TRACEPARENT
/// CURRENT` from its handler on the second): the caller's span `checkout` from `service`,
/// sked's enqueue its child, the claim and the worker's `sked.run KIND` the enqueue's, in
/// order, and the handler inside the run.
fn check_trace(receiver: &Receiver, printed: &str, service: &str, kind: &str) -> Vec<Span> {
    let words: Vec<&str> = printed.split_whitespace().collect();
    let [trace, caller, traceparent, current] = words[..] else {
        panic!("{printed}")
    };
    let run_name = format!("sked.run {kind}");
    let spans = receiver.trace(
        trace,
        &["checkout", "sked.enqueue", "sked.claim", &run_name],
    );
    let (checkout, enqueue, claim, run) = (
        one(&spans, "checkout"),
        one(&spans, "sked.enqueue"),
        one(&spans, "sked.claim"),
        one(&spans, &run_name),
    );
    assert_eq!(checkout.span_id, caller);
    assert_eq!(
        (checkout.service.as_str(), run.service.as_str()),
        (service, service)
    );
    assert_eq!(enqueue.service, "sked");
    assert_eq!(
        enqueue.parent_id, checkout.span_id,
        "the enqueue continues the caller"
    );
    assert_eq!(claim.parent_id, enqueue.span_id);
    assert_eq!(
        run.parent_id, enqueue.span_id,
        "the worker's run is the task's child"
    );
    assert!(enqueue.start_ns <= claim.start_ns && claim.start_ns <= run.start_ns);
    assert_eq!(run.attribute("sked.outcome"), Some("succeeded"));
    // Its flags are the SDK's (sampled, and random ids for newer SDKs).
    assert_eq!(&traceparent[..52], format!("00-{trace}-{}", run.span_id));
    assert_eq!(current, run.span_id, "the handler runs inside the run span");
    spans
}

/// The application's side, with OpenTelemetry's SDK: a span `checkout` enqueues a task, and a
/// worker runs it; prints the caller's trace and span ids, then what the handler saw.
const PYTHON_TRACED: &str = r#"
import sys
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from sked_client import Client, Worker

server, collector = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "py-app"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector + "/v1/traces")))
trace.set_tracer_provider(provider)
sked = Client(server)
with trace.get_tracer("app").start_as_current_span("checkout") as span:
    caller = span.get_span_context()
    sked.enqueue("py.traced", {"n": 1})
print(f"{caller.trace_id:032x} {caller.span_id:016x}")
worker = Worker(sked, concurrency=1)
seen = []

@worker.handle("py.traced")
def handle(task, ctx):
    current = trace.get_current_span().get_span_context()
    seen.append(f"{ctx.traceparent} {current.span_id:016x}")
    return {"ok": True}

worker.run(exit_when_idle=1.0)
print(seen[0])
provider.shutdown()
"#;

/// The same trace through the Python client: its enqueue inside the application's span
/// continues it, and its worker's run span is the task's child, current in the handler.
#[test]
#[ignore = "slow tier"]
fn the_python_client_continues_the_trace_through_sked_and_its_worker() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let server = receiver.server(dir.path(), &[]);
    let copy = copy_of(&package("python"), dir.path());
    let venv = crate::client_packages::venv_with(
        dir.path(),
        &[
            copy.as_path(),
            Path::new("opentelemetry-sdk"),
            Path::new("opentelemetry-exporter-otlp-proto-http"),
        ],
    );
    let run = Command::new(venv.join("bin/python"))
        .args(["-c", PYTHON_TRACED, &server.url, &receiver.url])
        .output()
        .unwrap();
    succeeded(&run);
    let printed = String::from_utf8(run.stdout).unwrap();
    check_trace(&receiver, &printed, "py-app", "py.traced");
}

/// The application's side in Node, with OpenTelemetry's Node SDK; prints as the Python one
/// does.
const NODE_TRACED: &str = r#"
import { trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { Client, Worker } from "sked-client";

const [server, collector] = process.argv.slice(2);
const exporter = new OTLPTraceExporter({ url: `${collector}/v1/traces` });
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "ts-app" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register();
const sked = new Client(server);
const caller = await trace.getTracer("app").startActiveSpan("checkout", async (span) => {
  await sked.enqueue("ts.traced", { n: 1 });
  span.end();
  return span.spanContext();
});
console.log(`${caller.traceId} ${caller.spanId}`);
let seen;
const worker = new Worker(sked, { concurrency: 1, log: () => {} }).handle("ts.traced", (task, ctx) => {
  seen = `${ctx.traceparent} ${trace.getActiveSpan().spanContext().spanId}`;
  return { ok: true };
});
await worker.run({ exitWhenIdle: 1 });
console.log(seen);
await provider.shutdown();
"#;

/// The same through the TypeScript client, from a project that installed it beside
/// OpenTelemetry's API, Node SDK and OTLP exporter (versions that fit together, pinned).
#[test]
#[ignore = "slow tier"]
fn the_typescript_client_continues_the_trace_through_sked_and_its_worker() {
    if !super::typescript_client::node() {
        return;
    }
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let server = receiver.server(dir.path(), &[]);
    let project = crate::client_packages::node_project(dir.path(), "app");
    let copy = copy_of(&package("typescript"), dir.path());
    // Copied in as a registry install would be (not linked), so that the client finds the
    // project's OpenTelemetry API.
    let npm = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--install-links"])
        .arg(&copy)
        .args([
            "@opentelemetry/api@1.9.1",
            "@opentelemetry/sdk-trace-node@2.12.0",
            "@opentelemetry/exporter-trace-otlp-proto@0.223.1",
            "@opentelemetry/resources@2.12.1",
        ])
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&npm);
    std::fs::write(project.join("traced.mjs"), NODE_TRACED).unwrap();
    let run = Command::new("node")
        .args(["traced.mjs", &server.url, &receiver.url])
        .current_dir(&project)
        .output()
        .unwrap();
    succeeded(&run);
    let printed = String::from_utf8(run.stdout).unwrap();
    check_trace(&receiver, &printed, "ts-app", "ts.traced");
}
