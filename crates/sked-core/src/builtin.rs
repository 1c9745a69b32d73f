//! The payloads of the built-in kinds, `shell` and `http`: one definition, read by the
//! executors when they run a task and checked when a task or a schedule is written, so that a
//! mistake (`{"cmd": "…"}`) is refused at once, not found when the task runs at 02:30.
//!
//! The kinds are the built-in executors' whether or not the node that takes the task runs
//! them: a task of kind `shell` is for a node with `--exec shell`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::SpecError;

/// The kind of the built-in executor that runs a command.
pub(crate) const SHELL: &str = "shell";
/// The kind of the built-in executor that makes an HTTP request.
pub(crate) const HTTP: &str = "http";

/// The `shell` kind's payload: `{"command": "…"}` or `{"argv": […]}`, with optional `env` and
/// `cwd`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellPayload {
    /// A command line for `sh -c`.
    pub command: Option<String>,
    /// A program and its arguments, run without a shell.
    pub argv: Option<Vec<String>>,
    /// Variables added to the command's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The directory it runs in.
    pub cwd: Option<String>,
}

/// What a shell payload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShellCommand<'a> {
    /// `sh -c` this line.
    Line(&'a str),
    /// This program with these arguments.
    Argv(&'a str, &'a [String]),
}

impl ShellPayload {
    /// Reads and checks a payload: the fields known, exactly one of `command` or a non-empty
    /// `argv`.
    pub fn parse(payload: &serde_json::Value) -> Result<ShellPayload, SpecError> {
        let p = ShellPayload::deserialize(payload)
            .map_err(|e| SpecError::new(format!("invalid shell payload: {e}")))?;
        p.command()?;
        Ok(p)
    }

    /// What it runs.
    pub fn command(&self) -> Result<ShellCommand<'_>, SpecError> {
        match (&self.command, &self.argv) {
            (Some(line), None) => Ok(ShellCommand::Line(line)),
            (None, Some(argv)) if !argv.is_empty() => Ok(ShellCommand::Argv(&argv[0], &argv[1..])),
            _ => Err(SpecError::new(
                "invalid shell payload: it needs exactly one of \"command\" or a non-empty \"argv\"",
            )),
        }
    }
}

/// The `http` kind's payload: `{"url": "…"}` with optional `method` (GET), `headers`, `body`
/// (a string is sent as it is, other JSON as JSON) and `follow_redirects`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPayload {
    /// The request's method (`GET` by default), any case.
    #[serde(default = "get")]
    pub method: String,
    /// An `http://` or `https://` URL.
    pub url: String,
    /// Headers to send.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The body to send.
    pub body: Option<serde_json::Value>,
    /// Whether to follow redirects (not by default).
    #[serde(default)]
    pub follow_redirects: bool,
}

fn get() -> String {
    "GET".into()
}

impl HttpPayload {
    /// Reads and checks a payload: the fields known, the method a token, the URL `http://` or
    /// `https://` with a host. (The executor parses the URL fully when it runs.)
    pub fn parse(payload: &serde_json::Value) -> Result<HttpPayload, SpecError> {
        let p = HttpPayload::deserialize(payload)
            .map_err(|e| SpecError::new(format!("invalid http payload: {e}")))?;
        // RFC 9110's token characters.
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if p.method.is_empty() || !p.method.chars().all(token) {
            return Err(SpecError::new(format!(
                "invalid http payload: method {:?} is not an HTTP method",
                p.method
            )));
        }
        let host = ["http://", "https://"]
            .iter()
            .find_map(|scheme| {
                p.url
                    .get(..scheme.len())
                    .filter(|s| s.eq_ignore_ascii_case(scheme))
                    .map(|_| &p.url[scheme.len()..])
            })
            .ok_or_else(|| {
                SpecError::new(format!(
                    "invalid http payload: url {:?}: its scheme is not http or https",
                    p.url
                ))
            })?;
        if host.split(['/', '?', '#']).next().unwrap_or("").is_empty() {
            return Err(SpecError::new(format!(
                "invalid http payload: url {:?} names no host",
                p.url
            )));
        }
        Ok(p)
    }
}

/// Checks a payload of a built-in kind (`shell`, `http`); other kinds' payloads are their
/// handlers' business.
pub fn check_builtin_payload(kind: &str, payload: &serde_json::Value) -> Result<(), SpecError> {
    match kind {
        SHELL => ShellPayload::parse(payload).map(drop),
        HTTP => HttpPayload::parse(payload).map(drop),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn refused(kind: &str, payload: serde_json::Value) -> String {
        check_builtin_payload(kind, &payload)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn shell_payloads_are_checked() {
        for ok in [
            json!({"command": "echo hi"}),
            json!({"argv": ["ls", "-l"], "env": {"A": "1"}, "cwd": "/tmp"}),
        ] {
            check_builtin_payload("shell", &ok).unwrap();
        }
        assert!(refused("shell", json!({"cmd": "echo"})).contains("unknown field `cmd`"));
        assert!(refused("shell", json!({})).contains("exactly one of"));
        assert!(refused("shell", json!({"command": "a", "argv": ["b"]})).contains("exactly one"));
        assert!(refused("shell", json!({"argv": []})).contains("non-empty"));
        assert!(refused("shell", json!("echo")).contains("invalid shell payload"));
        assert!(refused("shell", json!(null)).contains("invalid shell payload"));
    }

    #[test]
    fn http_payloads_are_checked() {
        for ok in [
            json!({"url": "https://example.org/hook"}),
            json!({"url": "HTTP://10.0.0.1:8080?x=1", "method": "post", "body": {"a": 1}}),
        ] {
            check_builtin_payload("http", &ok).unwrap();
        }
        assert!(refused("http", json!({"uri": "https://x"})).contains("unknown field `uri`"));
        assert!(refused("http", json!({"method": "GET"})).contains("missing field `url`"));
        assert!(refused("http", json!({"url": "ftp://x"})).contains("scheme is not http"));
        assert!(refused("http", json!({"url": "https:///path"})).contains("no host"));
        assert!(refused("http", json!({"url": "https://x", "method": "GE T"})).contains("method"));
    }

    #[test]
    fn other_kinds_are_their_handlers_business() {
        check_builtin_payload("email.send", &json!({"cmd": 1})).unwrap();
        check_builtin_payload("shell.custom", &json!(null)).unwrap();
    }
}
