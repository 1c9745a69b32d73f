//! `/openapi.json` against what it describes: the routes the server answers, the wire types,
//! and the Python and TypeScript clients, which are written by hand and read here.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use serde_json::Value;

use crate::support::api;

fn document() -> Value {
    sked_server::openapi()
}

fn source(path: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../");
    std::fs::read_to_string(format!("{root}{path}")).unwrap()
}

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// Every operation as `(METHOD, path)`.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for m in item.as_object().unwrap().keys() {
            if METHODS.contains(&m.as_str()) {
                ops.push((m.to_uppercase(), path.clone()));
            }
        }
    }
    ops
}

#[tokio::test]
async fn the_document_is_what_the_server_serves() {
    let a = api(None);
    let (s, served) = a.call("GET", "/openapi.json", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(served, document());
    assert_eq!(served["openapi"], "3.1.0");
}

/// Routes are registered only with their operations (`routes!`), and every documented
/// operation is answered by its handler, not by the fallback or a 405.
#[tokio::test]
async fn every_route_is_documented_and_every_operation_is_routed() {
    let lib = source("crates/sked-server/src/lib.rs");
    for (i, line) in lib.lines().enumerate() {
        assert!(
            !line.contains(".route(") && !line.contains(".route_service("),
            "lib.rs:{}: a route added without its operation: register it with routes!",
            i + 1
        );
    }
    let doc = document();
    let ops = operations(&doc);
    assert!(ops.len() >= 45, "{} operations", ops.len());
    let a = api(None);
    for (method, path) in &ops {
        let uri = path
            .replace("{id}", "1")
            .replace("{name}", "n")
            .replace("{group}", "g");
        let body = (method != "GET" && method != "DELETE").then_some("{}");
        let (status, bytes) = a.raw(method, &uri, body).await;
        let text = String::from_utf8_lossy(&bytes);
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(
            !text.contains("no such endpoint"),
            "{method} {path} is documented but not routed"
        );
    }
    // And the converse for a path that is not documented.
    let (status, bytes) = a.raw("GET", "/v1/nothing-here", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&bytes).contains("no such endpoint"));
}

/// Every schema referred to exists, and every operation documents a success with its body.
#[test]
fn every_reference_resolves_and_every_success_has_a_body() {
    let doc = document();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 50);
    for r in &refs {
        let name = r.strip_prefix("#/components/schemas/").unwrap();
        assert!(schemas.contains_key(name), "{r} does not resolve");
    }
    for (method, path) in operations(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        assert!(
            op["operationId"].is_string(),
            "{method} {path}: no operationId"
        );
        assert!(op["responses"]["default"].is_object(), "{method} {path}");
        let ok: Vec<(&String, &Value)> = op["responses"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(s, _)| s.starts_with('2'))
            .collect();
        assert!(!ok.is_empty(), "{method} {path}: no success documented");
        for (status, r) in ok {
            if status != "204" {
                let content = r["content"].as_object();
                let schema = content
                    .and_then(|c| c.values().next())
                    .map(|c| &c["schema"]);
                assert!(
                    schema.is_some_and(|s| !s.is_null()),
                    "{method} {path} {status}: no body"
                );
            }
        }
    }
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Types of `sked::api` that never cross the wire: what the CLI prints on its own.
const NOT_WIRE_TYPES: [&str; 3] = ["Overview", "ImportReport", "ScheduleDetail"];

/// Every serialized type of the API module derives its schema, so a new wire type cannot be
/// left out of the document (a handler naming a type without one does not compile).
#[test]
fn every_wire_type_has_a_schema() {
    let mut checked = 0;
    for file in ["mod.rs", "worker.rs", "schedules.rs", "error.rs"] {
        let text = source(&format!("crates/sked/src/api/{file}"));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = line
                .strip_prefix("pub struct ")
                .or_else(|| line.strip_prefix("pub enum "))
                .and_then(|rest| rest.split([' ', '<', '(', '{']).next())
            else {
                continue;
            };
            let attrs: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .copied()
                .collect();
            let serde = attrs
                .iter()
                .any(|a| a.contains("Serialize") || a.contains("Deserialize"));
            if !serde || NOT_WIRE_TYPES.contains(&name) {
                continue;
            }
            let schema = attrs
                .iter()
                .any(|a| a.contains("utoipa::ToSchema") || a.contains("utoipa::IntoParams"));
            assert!(
                schema,
                "sked::api {name} ({file}) crosses the wire without a schema"
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} types");
}

/// The property names of a schema, following `allOf`.
fn properties(doc: &Value, schema: &str) -> BTreeSet<String> {
    let s = &doc["components"]["schemas"][schema];
    let mut names: BTreeSet<String> = s["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for part in s["allOf"].as_array().into_iter().flatten() {
        if let Some(r) = part["$ref"].as_str() {
            names.extend(properties(doc, r.rsplit('/').next().unwrap()));
        }
        names.extend(
            part["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone()),
        );
    }
    names
}

/// The names between `{` and `}` after `start` in TypeScript: `name?: type;` lines.
fn ts_fields(text: &str, start: &str) -> BTreeSet<String> {
    let body = &text[text.find(start).unwrap_or_else(|| panic!("{start}"))..];
    let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
    body.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("/**") && !l.starts_with('*') && !l.is_empty())
        .filter_map(|l| l.split([':', '?']).next())
        .map(str::to_string)
        .collect()
}

/// The keyword parameters of a Python function: `name: type = default,` lines after `*,`.
fn py_params(text: &str, start: &str) -> BTreeSet<String> {
    let body = &text[text.find(start).unwrap_or_else(|| panic!("{start}"))..];
    let body = &body[..body.find(')').unwrap()];
    body.lines()
        .map(str::trim)
        .filter(|l| l.contains(':'))
        .filter_map(|l| l.split(':').next())
        .filter(|n| *n != "self")
        .map(str::to_string)
        .collect()
}

/// The query parameters of `GET /v1/tasks`.
fn task_filters(doc: &Value) -> BTreeSet<String> {
    doc["paths"]["/v1/tasks"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect()
}

fn error_codes(doc: &Value) -> BTreeSet<String> {
    doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        // What a client reads a code it does not know as; never sent.
        .filter(|c| c != "unknown")
        .collect()
}

#[test]
fn the_typescript_client_names_what_the_document_names() {
    let doc = document();
    let types = source("clients/typescript/src/index.d.ts");
    let mut task = ts_fields(&types, "export interface TaskOptions");
    task.extend(ts_fields(&types, "export interface NewTask extends"));
    assert_eq!(task, properties(&doc, "NewTask"), "TaskOptions and NewTask");
    let params = task_filters(&doc);
    let filters = ts_fields(&types, "export interface TaskFilters");
    assert!(
        filters.is_subset(&params),
        "{filters:?} not all in {params:?}"
    );
    let script = source("clients/typescript/src/index.js");
    let codes_list = &script[script.find("const CODES = [").unwrap()..];
    let codes: BTreeSet<String> = codes_list[..codes_list.find("];").unwrap()]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    assert_eq!(codes, error_codes(&doc), "index.js CODES");
    let classes = ts_fields(&types, "export const errors: {");
    let camel: BTreeSet<String> = codes
        .iter()
        .map(|c| {
            c.split('_')
                .map(|w| w[..1].to_uppercase() + &w[1..])
                .collect()
        })
        .collect();
    assert_eq!(classes, camel, "index.d.ts errors");
}

#[test]
fn the_python_client_names_what_the_document_names() {
    let doc = document();
    let client = source("clients/python/src/sked_client/client.py");
    let mut task = py_params(&client, "def new_task(");
    task.remove("payload");
    task.insert("payload".into());
    assert_eq!(task, properties(&doc, "NewTask"), "new_task()");
    let list = py_params(&client, "    def list(");
    let params = task_filters(&doc);
    assert!(list.is_subset(&params), "{list:?} not all in {params:?}");
    let errors = source("clients/python/src/sked_client/errors.py");
    let codes: BTreeSet<String> = errors
        .lines()
        .filter_map(|l| l.trim().strip_prefix("code = \""))
        .map(|c| c.trim_end_matches('"').to_string())
        .filter(|c| c != "unknown")
        .collect();
    assert_eq!(codes, error_codes(&doc), "errors.py");
}

/// The path a client's string literal starts with (`text` is just after its opening quote),
/// its parameters written `{}`: a `{…}` or `${…}` right after a `/` is a parameter; anything
/// else that is not plain text (a query, a closing quote, an appended suffix) ends it.
fn client_path(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let opens = c == '{' || (c == '$' && chars.peek() == Some(&'{'));
        if opens {
            if !out.ends_with('/') {
                break;
            }
            if c == '$' {
                chars.next();
            }
            let mut depth = 1;
            for c in chars.by_ref() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    break;
                }
            }
            out.push_str("{}");
        } else if matches!(c, '"' | '`' | '?' | '\'') {
            break;
        } else {
            out.push(c);
        }
    }
    out
}

/// Every `(METHOD, path)` a client's sources call: a method's string followed by a path's, and
/// the paths given to its every-page helper (`helper`), which reads them with GET.
fn client_calls(sources: &[String], helper: &str) -> BTreeSet<(String, String)> {
    let mut calls = BTreeSet::new();
    for text in sources {
        for method in METHODS.map(str::to_uppercase) {
            let quoted = format!("\"{method}\",");
            for (i, _) in text.match_indices(&quoted) {
                let rest = text[i + quoted.len()..].trim_start();
                let rest = rest.strip_prefix('f').unwrap_or(rest);
                if let Some(literal) = rest.strip_prefix(['"', '`']) {
                    calls.insert((method.clone(), client_path(literal)));
                }
            }
        }
        for (i, _) in text.match_indices(helper) {
            if let Some(literal) = text[i + helper.len()..].strip_prefix('"') {
                calls.insert(("GET".to_string(), client_path(literal)));
            }
        }
    }
    calls
}

/// Every operation of the API (`/v1/…`) has a method in both clients: a test that fails when
/// the server gains an operation and a client does not.
#[test]
fn every_operation_has_a_method_in_both_clients() {
    let ops: BTreeSet<(String, String)> = operations(&document())
        .into_iter()
        .filter(|(_, path)| path.starts_with("/v1/"))
        .map(|(method, path)| {
            let mut normal = String::new();
            let mut in_param = false;
            for c in path.chars() {
                match c {
                    '{' => in_param = true,
                    '}' => {
                        in_param = false;
                        normal.push_str("{}");
                    }
                    _ if in_param => {}
                    _ => normal.push(c),
                }
            }
            (method, normal)
        })
        .collect();
    assert!(ops.len() >= 40, "{} operations", ops.len());
    let python = client_calls(
        &[
            source("clients/python/src/sked_client/client.py"),
            source("clients/python/src/sked_client/worker.py"),
        ],
        "_every_page(",
    );
    let typescript = client_calls(&[source("clients/typescript/src/index.js")], "#everyPage(");
    for (client, calls) in [("Python", &python), ("TypeScript", &typescript)] {
        let missing: Vec<_> = ops.difference(calls).collect();
        assert!(
            missing.is_empty(),
            "the {client} client has no method for {missing:?}"
        );
    }
    // The check reads what it should: a call of each shape is found.
    assert!(python.contains(&("GET".into(), "/v1/tasks/{}/held".into())));
    assert!(typescript.contains(&("POST".into(), "/v1/queues/{}/pause".into())));
}
