//! OpenAPI schemas of the values the wire types hold as plain strings: durations, names, keys,
//! rates and overlap policies. Fields name them with `#[schema(value_type = …)]`, so
//! `/openapi.json` states the same limits the parsers enforce, and a generated request is
//! valid exactly when sked accepts it.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

/// A string schema with a description and the given pattern and lengths.
fn string(description: &str, pattern: Option<&str>, lengths: Option<(usize, usize)>) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
        .pattern(pattern)
        .min_length(lengths.map(|l| l.0))
        .max_length(lengths.map(|l| l.1))
        .into()
}

macro_rules! string_schema {
    ($(#[$m:meta])* $name:ident, $description:expr, $pattern:expr, $lengths:expr) => {
        $(#[$m])*
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                string($description, $pattern, $lengths).into()
            }
        }

        impl ToSchema for $name {}
    };
}

/// What [`crate::parse_duration`] reads, unanchored, with the blanks around it it trims.
macro_rules! duration_pattern {
    () => {
        r"\s*(?:[Pp][Tt](?=[0-9])(?:[0-9]+(?:[.,][0-9]{1,9})?[Hh])?(?:[0-9]+(?:[.,][0-9]{1,9})?[Mm])?(?:[0-9]+(?:[.,][0-9]{1,9})?[Ss])?|(?:[0-9]+\s*(?:ms|s|secs?|m|mins?|h|hrs?|d|days?)\s*)+)\s*"
    };
}

string_schema!(
    /// What [`crate::parse_duration`] reads.
    Duration,
    "a duration like 30s, 5m, 1h30m, 2d or 250ms (or ISO 8601, PT1H30M); at most 3650d, else 422",
    Some(concat!("^", duration_pattern!(), "$")),
    None
);

string_schema!(
    /// What [`crate::Backoff`] parses: a shape and its durations.
    BackoffSpec,
    "a retry backoff: exp:BASE..MAX (BASE doubling up to MAX, ±20 %; also BASE..MAX), \
     fixed:D, linear:STEP..MAX (STEP times the attempt, up to MAX) or a list of 1 to 32 \
     delays like 10s,1m,10m,1h (the last repeats); every delay above zero, a cap not below \
     the first delay, else 422",
    Some(concat!(
        r"^\s*(?:exp:",
        duration_pattern!(),
        r"\.\.",
        duration_pattern!(),
        r"|fixed:",
        duration_pattern!(),
        r"|linear:",
        duration_pattern!(),
        r"\.\.",
        duration_pattern!(),
        r"|",
        duration_pattern!(),
        r"\.\.",
        duration_pattern!(),
        r"|",
        duration_pattern!(),
        r"(?:,",
        duration_pattern!(),
        r"){0,31})\s*$"
    )),
    None
);

/// The exponential backoff as an object of its base and max (as it was first written).
#[derive(ToSchema, serde::Deserialize)]
#[allow(dead_code)] // A schema only.
#[serde(deny_unknown_fields)]
pub struct BackoffRange {
    #[schema(value_type = Duration)]
    base: String,
    #[schema(value_type = Duration)]
    max: String,
}

/// A task's backoff as the API takes it: a spec ([`BackoffSpec`]), or the exponential shape as
/// an object ([`BackoffRange`]). Answers give the spec.
pub struct Backoff;

impl PartialSchema for Backoff {
    fn schema() -> RefOr<Schema> {
        utoipa::openapi::schema::OneOfBuilder::new()
            .item(BackoffSpec::schema())
            .item(BackoffRange::schema())
            .into()
    }
}

impl ToSchema for Backoff {}

string_schema!(
    /// What [`crate::validate_name`] accepts: a kind, queue, schedule, group or worker name.
    Name,
    "1 to 128 characters: no whitespace, '/' or control characters",
    Some(r"^[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000/]*$"),
    Some((1, 128))
);

string_schema!(
    /// A unique or concurrency key ([`crate::MAX_KEY_CHARS`]).
    Key,
    "1 to 512 characters",
    None,
    Some((1, crate::MAX_KEY_CHARS))
);

string_schema!(
    /// What [`crate::RateLimit`] parses.
    Rate,
    "tasks started in any window of the period: 10/s, 20/min, 5/h, 1000/d, 3/5s; with ' burst B', a quiet queue may start B more in one window (10/s burst 5)",
    Some(r"^\s*[0-9]+\s*/\s*[0-9a-z ]+$"),
    None
);

string_schema!(
    /// What [`crate::OverlapPolicy`] parses.
    Overlap,
    "skip, allow, allow:N (at most N runs unfinished at once, 1 to 10000; others 422), buffer_one or replace",
    Some("^(skip|allow|buffer_one|replace|allow:[0-9]+)$"),
    None
);

/// A task of a workflow: [`crate::NewTask`]'s schema with its `name` in the workflow and the
/// names it waits for (`after`) among the properties, unknown fields refused as in a task.
impl PartialSchema for crate::WorkflowTask {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::ArrayBuilder;
        let RefOr::T(Schema::Object(mut task)) = <crate::NewTask as PartialSchema>::schema() else {
            unreachable!("a task's schema is an object");
        };
        task.properties.insert(
            "name".into(),
            string(
                "its name in the workflow: 1 to 128 characters, no whitespace, '/' or control characters",
                Some(r"^[^\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000/]*$"),
                Some((1, 128)),
            )
            .into(),
        );
        task.properties.insert(
            "after".into(),
            ArrayBuilder::new()
                .items(Name::schema())
                .description(Some(
                    "tasks of this workflow, by name, that must succeed before this one starts",
                ))
                .into(),
        );
        task.required.insert(0, "name".into());
        task.description = Some("A task of a workflow: a task as POST /v1/tasks takes it, a name of its own, and the names it waits for".into());
        RefOr::T(Schema::Object(task))
    }
}

impl ToSchema for crate::WorkflowTask {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        <crate::NewTask as ToSchema>::schemas(schemas);
    }
}
