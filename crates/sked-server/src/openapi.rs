//! `/openapi.json`: the document is derived, not written. Each handler's `#[utoipa::path]`
//! gives its operation, the wire types' `ToSchema` derives give the schemas, and
//! [`crate::openapi`] collects them from the routers themselves, so a route cannot be served
//! without being documented. What no type says is added here: the token, the error answer every
//! operation may give, and the links that let a client (or schemathesis) go from a created task
//! or schedule, or a claim, to the calls on it.

use std::sync::LazyLock;

use serde_json::Value;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder};
use utoipa::{PartialSchema, ToSchema};

/// The document, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| crate::openapi().to_string());

/// The calls a created task's id leads to: `(link, operation)`.
const TASK_CALLS: [(&str, &str); 10] = [
    ("GetTask", "getTask"),
    ("CancelTask", "cancelTask"),
    ("RetryTask", "retryTask"),
    ("RescheduleTask", "rescheduleTask"),
    ("HeartbeatTask", "heartbeatTask"),
    ("CompleteTask", "completeTask"),
    ("FailTask", "failTask"),
    ("SnoozeTask", "snoozeTask"),
    ("AcknowledgeCancel", "acknowledgeCancel"),
    ("ReleaseTask", "releaseTask"),
];

/// A field of a link's request body, and its value.
type Field = Option<(&'static str, &'static str)>;

/// The calls a claimed task leads to, with the field each needs beside its attempt.
const CLAIMED_CALLS: [(&str, &str, Field); 6] = [
    ("Heartbeat", "heartbeatTask", None),
    ("Complete", "completeTask", None),
    ("Fail", "failTask", Some(("error", "failed under test"))),
    ("Snooze", "snoozeTask", Some(("delay", "1m"))),
    ("AcknowledgeCancel", "acknowledgeCancel", None),
    ("Release", "releaseTask", None),
];

/// The calls a created schedule's name leads to.
const SCHEDULE_CALLS: [(&str, &str); 7] = [
    ("GetSchedule", "getSchedule"),
    ("PutSchedule", "putSchedule"),
    ("DeleteSchedule", "deleteSchedule"),
    ("PauseSchedule", "pauseSchedule"),
    ("ResumeSchedule", "resumeSchedule"),
    ("TriggerSchedule", "triggerSchedule"),
    ("ScheduleOccurrences", "scheduleOccurrences"),
];

#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    summary = "This document",
    responses((status = 200, description = "OK", body = Object))
)]
pub(crate) async fn serve() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

/// The document in JSON, with what the handlers and types do not say: the description, the
/// bearer token, the error answer of every operation, the links between operations, and each
/// integer's range.
pub(crate) fn complete(mut doc: OpenApi) -> Value {
    add(&mut doc);
    let mut json = serde_json::to_value(doc).expect("the document serializes");
    bound_integers(&mut json);
    json
}

fn add(doc: &mut OpenApi) {
    doc.info.title = "sked".into();
    doc.info.description = Some(
        "Durable, distributed task scheduler. All times are RFC 3339. When the server listens \
         beyond loopback, send Authorization: Bearer <token>."
            .into(),
    );
    doc.info.license = None;
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(
        "token",
        SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
    );
    components.schemas.insert(
        sked::api::ErrorBody::name().into_owned(),
        sked::api::ErrorBody::schema(),
    );
    doc.security = Some(vec![SecurityRequirement::new(
        "token",
        Vec::<String>::new(),
    )]);
    let error = ResponseBuilder::new()
        .description("Error")
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(sked::api::ErrorBody::name())))
                .build(),
        )
        .build();
    let schemas = &mut doc.components.get_or_insert_with(Default::default).schemas;
    // `PUT /v1/schedules/{name}` takes a definition whose name, when given, is the path's.
    let mut put = schemas["ScheduleDef"].clone();
    if let RefOr::T(Schema::Object(o)) = &mut put {
        o.required.retain(|r| r != "name");
        o.description =
            Some("A schedule; its name, when given, must be the path's (else 422).".into());
    }
    schemas.insert("SchedulePut".into(), put);
    // serde's `alias` is invisible to the derive: `limit` is read as `concurrency`.
    if let RefOr::T(Schema::Object(o)) = schemas.get_mut("QueueLimit").expect("QueueLimit") {
        let concurrency = o.properties["concurrency"].clone();
        o.properties.insert("limit".into(), concurrency);
    }
    let put = doc
        .paths
        .paths
        .get_mut("/v1/schedules/{name}")
        .and_then(|p| p.put.as_mut())
        .expect("PUT /v1/schedules/{name} is documented");
    put.request_body = Some(
        RequestBodyBuilder::new()
            .required(Some(Required::True))
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("SchedulePut")))
                    .build(),
            )
            .build()
            .into(),
    );
    for item in doc.paths.paths.values_mut() {
        for op in operations(item) {
            op.responses
                .responses
                .entry("default".into())
                .or_insert_with(|| error.clone().into());
        }
    }
    link(doc, "/v1/tasks", &["201", "200"], |r| {
        by_parameter(r, &TASK_CALLS, "id", "$response.body#/id")
    });
    link(doc, "/v1/claim", &["200"], |mut r| {
        for (name, op, extra) in CLAIMED_CALLS {
            let mut body = serde_json::json!({"attempt": "$response.body#/tasks/0/attempt"});
            if let Some((k, v)) = extra {
                body[k] = v.into();
            }
            r = r.link(
                name,
                LinkBuilder::new()
                    .operation_id(op)
                    .parameter("id", "$response.body#/tasks/0/id")
                    .request_body(Some(body))
                    .build(),
            );
        }
        r
    });
    link(doc, "/v1/schedules", &["201"], |r| {
        by_parameter(r, &SCHEDULE_CALLS, "name", "$response.body#/name")
    });
}

/// Links to each of `calls` (`(link, operation)`), passing `parameter` from `value`.
fn by_parameter(
    mut r: ResponseBuilder,
    calls: &[(&str, &str)],
    parameter: &str,
    value: &str,
) -> ResponseBuilder {
    for (name, op) in calls {
        r = r.link(
            *name,
            LinkBuilder::new()
                .operation_id(*op)
                .parameter(parameter, value)
                .build(),
        );
    }
    r
}

/// States each integer's range, that of its Rust type (`u32`: 0 to 4294967295), so that what
/// the document allows is what the server reads; formats beyond OpenAPI's `int32` and `int64`
/// (utoipa writes `u32` as `u-int32`) are dropped once said.
fn bound_integers(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let bounds = match m.get("format").and_then(Value::as_str) {
                Some("int8") => Some((i8::MIN.into(), i8::MAX.into(), false)),
                Some("int16") => Some((i16::MIN.into(), i16::MAX.into(), false)),
                Some("int32") => Some((i32::MIN.into(), i32::MAX.into(), true)),
                Some("int64") => Some((i64::MIN.into(), i64::MAX.into(), true)),
                Some("uint8" | "u-int8") => Some((0.into(), u8::MAX.into(), false)),
                Some("uint16" | "u-int16") => Some((0.into(), u16::MAX.into(), false)),
                Some("uint32" | "u-int32") => Some((0.into(), u32::MAX.into(), false)),
                Some("uint64" | "u-int64") => Some((0.into(), u64::MAX.into(), false)),
                _ => None,
            };
            if let Some((min, max, standard)) = bounds {
                m.entry("minimum").or_insert(Value::Number(min));
                m.entry("maximum").or_insert(Value::Number(max));
                if !standard {
                    m.remove("format");
                }
            }
            m.values_mut().for_each(bound_integers);
        }
        Value::Array(a) => a.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// Every operation of a path.
fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

/// Adds links to the answers `statuses` of `POST path` (every call that makes something).
fn link(
    doc: &mut OpenApi,
    path: &str,
    statuses: &[&str],
    add: impl Fn(ResponseBuilder) -> ResponseBuilder,
) {
    let op = doc
        .paths
        .paths
        .get_mut(path)
        .and_then(|item| item.post.as_mut())
        .expect("a documented POST");
    for status in statuses {
        let Some(RefOr::T(response)) = op.responses.responses.get_mut(*status) else {
            panic!("POST {path} documents no {status} answer");
        };
        let built = add(ResponseBuilder::from(response.clone())).build();
        *response = built;
    }
}
