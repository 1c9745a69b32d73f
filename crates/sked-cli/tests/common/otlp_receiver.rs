//! An OpenTelemetry collector for the tests: it takes OTLP/HTTP trace exports (protobuf, as
//! the Rust and Python exporters send them) on loopback, decodes them and keeps the spans.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// The one span named `name` among `spans`.
pub fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span in {spans:#?}");
    found[0]
}

/// A span as it arrived, ids in hex.
#[derive(Debug, Clone)]
pub struct Span {
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_id: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Its string and integer attributes, as text.
    pub attributes: Vec<(String, String)>,
}

impl Span {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Receiver {
    /// The base URL to give as the OTLP endpoint.
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let kept = kept.clone();
                std::thread::spawn(move || serve(conn, &kept));
            }
        });
        Receiver { url, spans }
    }

    /// A `sked server` in `dir` (on a SQLite file there) exporting its spans here every
    /// 100 ms, with `extra` flags.
    pub fn server(&self, dir: &std::path::Path, extra: &[&str]) -> crate::common::Server {
        let db = format!("sqlite://{}", dir.join("sked.db").display());
        let mut flags = vec!["--otlp-endpoint", self.url.as_str()];
        flags.extend_from_slice(extra);
        crate::common::Server::start_on(
            dir,
            &db,
            &flags,
            &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
            "server.log",
        )
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// The spans of trace `trace_id` once `names` have all arrived (waiting up to 30 s).
    pub fn trace(&self, trace_id: &str, names: &[&str]) -> Vec<Span> {
        let of_trace = || -> Vec<Span> {
            self.spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = of_trace();
            if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
                break;
            }
            let all: Vec<(String, String, String)> = self
                .spans()
                .into_iter()
                .map(|s| (s.service, s.name, s.trace_id))
                .collect();
            assert!(
                std::time::Instant::now() < deadline,
                "spans {names:?} of trace {trace_id} did not all arrive; every span: {all:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        of_trace()
    }
}

/// Answers the requests of one connection (clients keep it open between exports).
fn serve(conn: TcpStream, kept: &Mutex<Vec<Span>>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut length = 0usize;
        let mut encoding = String::new();
        let mut chunked = false;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "content-encoding" => encoding = value.trim().to_string(),
                "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
                _ => {}
            }
        }
        let body = match chunked {
            false => {
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                body
            }
            true => match read_chunks(&mut reader) {
                Some(body) => body,
                None => return,
            },
        };
        let status = if path != "/v1/traces" || !(encoding.is_empty() || encoding == "identity") {
            "404 Not Found"
        } else {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    kept.lock().unwrap().extend(spans_of(request));
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        );
        if conn.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A body sent in chunks (`transfer-encoding: chunked`, as Node's exporter sends it).
fn read_chunks(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).ok()?;
        let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
        let mut chunk = vec![0; size + 2]; // the chunk and its CRLF
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn spans_of(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in request.resource_spans {
        let service = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    service: service.clone(),
                    name: s.name,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_id: hex(&s.parent_span_id),
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                    attributes: s
                        .attributes
                        .iter()
                        .map(|a| {
                            let value = text(a.value.as_ref().and_then(|v| v.value.as_ref()));
                            (a.key.clone(), value)
                        })
                        .collect(),
                });
            }
        }
    }
    out
}
