//! A task to enqueue: its fields, their defaults and limits, and their validation.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::Backoff;
use crate::error::SpecError;

/// Limits that apply to new tasks.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;
pub const DEFAULT_QUEUE: &str = "default";

/// A task to enqueue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name))]
    pub kind: String,
    #[serde(default = "default_queue")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::openapi::Name, default = "default"))]
    pub queue: String,
    /// Any JSON, at most 1 MiB.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Higher runs first.
    #[serde(default)]
    pub priority: i32,
    /// When to run; `None` means now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<Timestamp>,
    #[serde(default = "default_max_attempts")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, default = 25))]
    pub max_attempts: i32,
    /// Execution deadline of one attempt.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub timeout: Option<SignedDuration>,
    /// At most one unfinished task holds a unique key (see `unique_for` for a window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Key>))]
    pub unique_key: Option<String>,
    /// With `unique_key`: the key is held this long after this task's enqueue, finished or
    /// not, and no longer, though the task has not run (a dedup window; without it the key
    /// is held while the task is unfinished).
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub unique_for: Option<SignedDuration>,
    /// With `unique_key`: the task runs once the key has been quiet this long. It is due
    /// `debounce` after its enqueue; an enqueue that finds the key held by a task that has
    /// not started replaces that task's payload and moves it to `debounce` from then.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub debounce: Option<SignedDuration>,
    /// Overrides the default retry backoff for this task: `exp:10s..6h` (the default's shape),
    /// `fixed:30s`, `linear:10s..5m` or a list like `10s,1m,10m,1h` ([`Backoff`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Backoff>))]
    pub backoff: Option<Backoff>,
    /// Its deadline to start: a task that has not started by then ends `expired` and never
    /// runs. After its run time (see `ttl` for a deadline counted from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
    /// Its deadline to start, counted from its run time (`run_at`, or its enqueue): `30m`
    /// makes a task due at 09:00 expire at 09:30 unless it started. Not with `expires_at`.
    #[serde(
        default,
        with = "crate::serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Duration>))]
    pub ttl: Option<SignedDuration>,
    /// A concurrency key (a tenant, say): a queue's per-key limit caps the running tasks of
    /// each key, and claims take keys in turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::openapi::Key>))]
    pub key: Option<String>,
    /// The W3C trace context (`traceparent`) the task continues: its claim and runs are spans of
    /// that trace, and its executors pass it on. Over HTTP the `traceparent` header sets it for
    /// the tasks of a request that give none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Tasks that must succeed before this one starts (at most [`MAX_PARENTS`]): until they
    /// have, it is `waiting`. A parent that already succeeded counts at once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<i64>, max_items = 100000))]
    pub depends_on: Vec<crate::TaskId>,
    /// What a parent that ends dead or cancelled does to this task.
    #[serde(default, skip_serializing_if = "ParentFailure::is_cancel")]
    pub on_parent_failure: ParentFailure,
    /// The batch it joins (`POST /v1/batches`): the batch's callbacks wait for its end. A
    /// batch whose callbacks have been enqueued takes no more tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i64>))]
    pub batch: Option<crate::BatchId>,
}

/// The most parents a task may name.
pub const MAX_PARENTS: usize = 100_000;

/// What a parent that ends dead or cancelled does to a task waiting for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ParentFailure {
    /// The task is cancelled, its error naming the parent; so are the tasks waiting for it.
    #[default]
    Cancel,
    /// The parent counts as done: the task runs once its other parents have succeeded.
    Run,
}

impl ParentFailure {
    pub fn is_cancel(&self) -> bool {
        *self == ParentFailure::Cancel
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ParentFailure::Cancel => "cancel",
            ParentFailure::Run => "run",
        }
    }

    pub fn parse(s: &str) -> Result<ParentFailure, SpecError> {
        match s {
            "cancel" => Ok(ParentFailure::Cancel),
            "run" => Ok(ParentFailure::Run),
            _ => Err(SpecError::new(format!(
                "unknown on_parent_failure {s:?}: expected cancel or run"
            ))),
        }
    }
}

/// The longest unique or concurrency key, in characters.
pub const MAX_KEY_CHARS: usize = 512;

/// The largest progress a heartbeat may carry, as compact JSON.
pub const MAX_PROGRESS_BYTES: usize = 4096;

/// Checks a progress a heartbeat carries: a number from 0 to 100, or a JSON object of at most
/// [`MAX_PROGRESS_BYTES`] whose `percent`, if it has one, is such a number.
pub fn check_progress(progress: &serde_json::Value) -> Result<(), SpecError> {
    let percent_ok = |v: &serde_json::Value| v.as_f64().is_some_and(|p| (0.0..=100.0).contains(&p));
    let ok = match progress {
        serde_json::Value::Number(_) => percent_ok(progress),
        serde_json::Value::Object(o) => o.get("percent").is_none_or(percent_ok),
        _ => false,
    };
    if !ok {
        return Err(SpecError::new(
            "progress must be a number from 0 to 100, or a JSON object (its percent, if any, from 0 to 100)",
        ));
    }
    let size = serde_json::to_vec(progress)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > MAX_PROGRESS_BYTES {
        return Err(SpecError::new(format!(
            "progress is {size} bytes; the limit is {MAX_PROGRESS_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Checks a task's parents: at most [`MAX_PARENTS`], each a task id, none twice.
pub fn check_parents(parents: &[crate::TaskId]) -> Result<(), SpecError> {
    if parents.len() > MAX_PARENTS {
        return Err(SpecError::new(format!(
            "depends_on names {} tasks; at most {MAX_PARENTS}",
            parents.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(parents.len());
    for &p in parents {
        if p < 1 {
            return Err(SpecError::new(format!("depends_on: {p} is not a task id")));
        }
        if !seen.insert(p) {
            return Err(SpecError::new(format!("depends_on names task {p} twice")));
        }
    }
    Ok(())
}

pub(crate) fn default_queue() -> String {
    DEFAULT_QUEUE.to_string()
}

pub(crate) fn default_max_attempts() -> i32 {
    DEFAULT_MAX_ATTEMPTS
}

impl NewTask {
    /// A task of this kind: queue `default`, no payload, priority 0, due now, 25 attempts.
    /// The methods below set the rest:
    /// `NewTask::new("email").payload(json!({"to": "a@b.c"})).queue("mail").priority(5)`.
    pub fn new(kind: impl Into<String>) -> NewTask {
        NewTask {
            kind: kind.into(),
            queue: default_queue(),
            payload: serde_json::Value::Null,
            priority: 0,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: None,
            unique_key: None,
            unique_for: None,
            debounce: None,
            backoff: None,
            expires_at: None,
            ttl: None,
            key: None,
            traceparent: None,
            depends_on: Vec::new(),
            on_parent_failure: ParentFailure::Cancel,
            batch: None,
        }
    }

    /// Waiting until these tasks have succeeded.
    pub fn after(mut self, parents: impl IntoIterator<Item = crate::TaskId>) -> NewTask {
        self.depends_on = parents.into_iter().collect();
        self
    }

    /// Joining this batch.
    pub fn batch(mut self, batch: crate::BatchId) -> NewTask {
        self.batch = Some(batch);
        self
    }

    /// Whether a parent that ends dead or cancelled cancels this task or lets it run.
    pub fn on_parent_failure(mut self, then: ParentFailure) -> NewTask {
        self.on_parent_failure = then;
        self
    }

    /// Continuing this W3C trace context (a `traceparent` value).
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> NewTask {
        self.traceparent = Some(traceparent.into());
        self
    }

    /// With this concurrency key: a queue's per-key limit caps the running tasks of each key,
    /// and claims take keys in turn.
    pub fn key(mut self, key: impl Into<String>) -> NewTask {
        self.key = Some(key.into());
        self
    }

    /// In this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> NewTask {
        self.queue = queue.into();
        self
    }

    /// With this JSON payload (at most 1 MiB serialized).
    pub fn payload(mut self, payload: serde_json::Value) -> NewTask {
        self.payload = payload;
        self
    }

    /// With this priority: higher runs first.
    pub fn priority(mut self, priority: i32) -> NewTask {
        self.priority = priority;
        self
    }

    /// Due at this time instead of now.
    pub fn run_at(mut self, at: Timestamp) -> NewTask {
        self.run_at = Some(at);
        self
    }

    /// At most this many attempts before it is dead.
    pub fn max_attempts(mut self, n: i32) -> NewTask {
        self.max_attempts = n;
        self
    }

    /// Each attempt is stopped after this long.
    pub fn timeout(mut self, timeout: SignedDuration) -> NewTask {
        self.timeout = Some(timeout);
        self
    }

    /// While an unfinished task holds this key, enqueuing another returns that one.
    pub fn unique_key(mut self, key: impl Into<String>) -> NewTask {
        self.unique_key = Some(key.into());
        self
    }

    /// With a unique key: the key stays held this long after the enqueue, finished or not.
    pub fn unique_for(mut self, window: SignedDuration) -> NewTask {
        self.unique_for = Some(window);
        self
    }

    /// With a unique key: runs once the key has been quiet this long (see
    /// [`NewTask::debounce`]'s field).
    pub fn debounce(mut self, quiet: SignedDuration) -> NewTask {
        self.debounce = Some(quiet);
        self
    }

    /// Retries wait `base`, doubling up to `max` (with jitter), instead of the default.
    pub fn backoff(self, base: SignedDuration, max: SignedDuration) -> NewTask {
        self.backoff_shape(Backoff::Exponential { base, max })
    }

    /// Retries wait as `backoff` says instead of the default.
    pub fn backoff_shape(mut self, backoff: Backoff) -> NewTask {
        self.backoff = Some(backoff);
        self
    }

    /// Not started by `at`, it ends `expired` and never runs.
    pub fn expires_at(mut self, at: Timestamp) -> NewTask {
        self.expires_at = Some(at);
        self
    }

    /// Not started within `ttl` of its run time, it ends `expired` and never runs.
    pub fn ttl(mut self, ttl: SignedDuration) -> NewTask {
        self.ttl = Some(ttl);
        self
    }

    /// Its deadline to start, enqueued at `now`: `expires_at`, or `ttl` after its run time.
    /// An error when the deadline is not after its run time and `now`: such a task could
    /// never run.
    pub fn deadline(&self, now: Timestamp) -> Result<Option<Timestamp>, SpecError> {
        let run_at = self.run_at.unwrap_or(now);
        let deadline = match (self.expires_at, self.ttl) {
            (Some(at), _) => at,
            (None, Some(ttl)) => run_at
                .checked_add(ttl)
                .map_err(|e| SpecError::new(format!("ttl: {e}")))?,
            (None, None) => return Ok(None),
        };
        let earliest = run_at.max(now);
        if deadline <= earliest {
            return Err(SpecError::new(format!(
                "the task's deadline to start ({deadline}) is not after its run time or now \
                 ({earliest}): it could never run"
            )));
        }
        Ok(Some(deadline))
    }

    /// Checks everything that can be checked without a store.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.validate_fields()?;
        check_payload_size(json_len(&self.payload))
    }

    /// Checks everything [`validate`](Self::validate) checks but the payload's size, for a
    /// caller that serializes the payload anyway and gives its length to
    /// [`check_payload_size`].
    pub fn validate_fields(&self) -> Result<(), SpecError> {
        validate_name("kind", &self.kind)?;
        validate_name("queue", &self.queue)?;
        crate::check_builtin_payload(&self.kind, &self.payload)?;
        if self.max_attempts < 1 {
            return Err(SpecError::new(format!(
                "max_attempts must be at least 1, got {}",
                self.max_attempts
            )));
        }
        if let Some(t) = self.timeout {
            if t <= SignedDuration::ZERO {
                return Err(SpecError::new("timeout must be positive"));
            }
            crate::check_duration("timeout", t)?;
        }
        for (name, k) in [("unique_key", &self.unique_key), ("key", &self.key)] {
            if let Some(k) = k
                && (k.is_empty() || k.chars().count() > MAX_KEY_CHARS)
            {
                return Err(SpecError::new(format!(
                    "{name} must be 1 to {MAX_KEY_CHARS} characters long"
                )));
            }
        }
        if let Some(tp) = &self.traceparent {
            crate::check_traceparent(tp)?;
        }
        for (name, d) in [("unique_for", self.unique_for), ("debounce", self.debounce)] {
            let Some(d) = d else { continue };
            if self.unique_key.is_none() {
                return Err(SpecError::new(format!("{name} needs a unique_key")));
            }
            if d <= SignedDuration::ZERO {
                return Err(SpecError::new(format!("{name} must be positive")));
            }
            crate::check_duration(name, d)?;
        }
        if self.unique_for.is_some() && self.debounce.is_some() {
            return Err(SpecError::new(
                "unique_for and debounce do not go together: a debounced key is held until its task starts",
            ));
        }
        if let Some(b) = &self.backoff {
            b.validate()?;
        }
        if let Some(ttl) = self.ttl {
            if self.expires_at.is_some() {
                return Err(SpecError::new(
                    "give ttl or expires_at, not both: each sets the task's deadline to start",
                ));
            }
            if ttl <= SignedDuration::ZERO {
                return Err(SpecError::new("ttl must be positive"));
            }
            crate::check_duration("ttl", ttl)?;
        }
        check_parents(&self.depends_on)?;
        if !self.depends_on.is_empty() && self.debounce.is_some() {
            return Err(SpecError::new(
                "debounce and depends_on do not go together: a debounced task is replaced before it starts, a waiting one keeps its parents",
            ));
        }
        Ok(())
    }
}

/// How many bytes `v` takes as compact JSON, counted as it is written, not kept.
fn json_len(v: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, v) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
    }
}

/// A payload of `size` bytes of JSON is within [`MAX_PAYLOAD_BYTES`].
pub fn check_payload_size(size: usize) -> Result<(), SpecError> {
    if size > MAX_PAYLOAD_BYTES {
        return Err(SpecError::new(format!(
            "payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Names of kinds, queues and schedules: 1 to 128 characters, no control characters.
pub fn validate_name(what: &str, name: &str) -> Result<(), SpecError> {
    if name.is_empty() || name.chars().count() > 128 {
        return Err(SpecError::new(format!(
            "{what} must be 1 to 128 characters long"
        )));
    }
    if name
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || c == '/')
    {
        return Err(SpecError::new(format!(
            "{what} {name:?} contains whitespace, '/' or a control character"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_counted_as_its_json_is_long() {
        let big = "é".repeat(MAX_PAYLOAD_BYTES / 2);
        for v in [
            serde_json::json!(null),
            serde_json::json!({"i": 1, "text": "naïve \"quoted\"\n", "list": [1.5, -2, true]}),
            serde_json::json!({"big": big}),
        ] {
            assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len());
        }
        // Each "é" is two bytes: just past the limit, with the braces and the key.
        let task = NewTask::new("k").payload(serde_json::json!({"big": big}));
        let err = task.validate().unwrap_err();
        assert!(
            err.message().contains("bytes; the limit is"),
            "{}",
            err.message()
        );
        let fits = NewTask::new("k").payload(serde_json::json!({"s": "x".repeat(1000)}));
        fits.validate().unwrap();
    }
}
