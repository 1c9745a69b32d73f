//! Who may do what: API tokens, each with a name and scopes, and the scope each route needs.
//!
//! - `admin`: everything;
//! - `enqueue`: add tasks (`POST /v1/tasks`, `/v1/tasks/batch`, `/v1/workflows`), open and
//!   close batches (`POST /v1/batches`, `/v1/batches/{id}/close`);
//! - `work`: the worker protocol (claims, heartbeats, endings, declared schedules, presence);
//! - `read`: every `GET` (lists, tasks, schedules, queues, `/metrics`, `/openapi.json`).
//!
//! A token holds any of them. A request without a known token gets 401; one whose token lacks
//! the route's scope gets 403 naming the scope it needs. Secrets are compared in constant time,
//! against every token (so the time does not say which one matched), and never logged; an
//! operator's change through the API (a request that needs `admin`: cancel, retry, pause,
//! limits, schedule changes, …) is logged with the token's name (target `sked::audit`).

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{ApiError, AppState};

/// What a token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Admin,
    Enqueue,
    Work,
    Read,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Enqueue => "enqueue",
            Scope::Work => "work",
            Scope::Read => "read",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        [Scope::Admin, Scope::Enqueue, Scope::Work, Scope::Read]
            .into_iter()
            .find(|scope| scope.as_str() == s)
    }
}

/// One API token.
#[derive(Clone)]
pub struct Token {
    name: String,
    scopes: Vec<Scope>,
    secret: String,
}

impl std::fmt::Debug for Token {
    // The secret stays out of every log and panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Token {
    /// `NAME:SCOPES:SECRET`, the scopes separated by commas (`ci:enqueue,read:s3cret`); the
    /// secret is the rest of the line and may hold colons.
    pub fn parse(line: &str) -> Result<Token, String> {
        let mut parts = line.splitn(3, ':');
        let (Some(name), Some(scopes), Some(secret)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("a token is NAME:SCOPES:SECRET".into());
        };
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(format!(
                "invalid token name {name:?}: letters, digits, '-', '_' and '.' only"
            ));
        }
        let scopes = scopes
            .split(',')
            .map(|s| {
                Scope::parse(s.trim()).ok_or_else(|| {
                    format!("unknown scope {s:?} for token {name}: admin, enqueue, work or read")
                })
            })
            .collect::<Result<Vec<Scope>, String>>()?;
        Token::new(name, scopes, secret)
    }

    /// A token with `scopes` and `secret` (visible ASCII, at least 16 characters).
    pub fn new(name: &str, scopes: Vec<Scope>, secret: &str) -> Result<Token, String> {
        if secret.len() < 16 || !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the secret of token {name} must be at least 16 visible ASCII characters"
            ));
        }
        Ok(Token {
            name: name.to_owned(),
            scopes,
            secret: secret.to_owned(),
        })
    }

    fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }
}

/// The tokens a server accepts.
#[derive(Debug, Clone)]
pub struct Tokens(Vec<Token>);

impl Tokens {
    /// The single token of `--token`: named `admin`, every scope.
    pub fn admin(secret: &str) -> Tokens {
        Tokens(vec![Token {
            name: "admin".into(),
            scopes: vec![Scope::Admin],
            secret: secret.to_owned(),
        }])
    }

    /// A tokens file: one `NAME:SCOPES:SECRET` per line; blank lines and lines starting with
    /// `#` are skipped. Names must differ, and so must secrets.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut tokens: Vec<Token> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let token = Token::parse(line).map_err(|e| format!("line {}: {e}", i + 1))?;
            if tokens.iter().any(|t| t.name == token.name) {
                return Err(format!("line {}: token {} named twice", i + 1, token.name));
            }
            if tokens.iter().any(|t| t.secret == token.secret) {
                return Err(format!(
                    "line {}: token {} has the secret of another",
                    i + 1,
                    token.name
                ));
            }
            tokens.push(token);
        }
        if tokens.is_empty() {
            return Err("no token in the file".into());
        }
        Ok(Tokens(tokens))
    }

    /// The token a request carries (`Authorization: Bearer <secret>`), compared in constant
    /// time with every secret.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<&Token> {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let mut found = None;
        for token in &self.0 {
            if same(given, &token.secret) {
                found = Some(token);
            }
        }
        found
    }
}

/// `a == b` in time that depends on their lengths only.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The routes of `enqueue` (with `POST`).
const ENQUEUE: [&str; 5] = [
    "/v1/tasks",
    "/v1/tasks/batch",
    "/v1/workflows",
    "/v1/batches",
    "/v1/batches/{id}/close",
];

/// The routes of the worker protocol (with any method).
const WORK: [&str; 12] = [
    "/v1/claim",
    "/v1/heartbeat",
    "/v1/finish",
    "/v1/work",
    "/v1/tasks/{id}/heartbeat",
    "/v1/tasks/{id}/complete",
    "/v1/tasks/{id}/fail",
    "/v1/tasks/{id}/snooze",
    "/v1/tasks/{id}/cancelled",
    "/v1/tasks/{id}/release",
    "/v1/declared/{group}",
    "/v1/workers/{id}",
];

/// The scope a request needs, by its method and route.
pub(crate) fn required(method: &Method, route: &str) -> Scope {
    if *method == Method::POST && ENQUEUE.contains(&route) {
        Scope::Enqueue
    } else if WORK.contains(&route) {
        Scope::Work
    } else if matches!(*method, Method::GET | Method::HEAD) {
        Scope::Read
    } else {
        Scope::Admin
    }
}

/// Checks the request's token and the scope its route needs; logs changes with the token's
/// name.
pub(crate) async fn check(
    State(state): State<AppState>,
    route: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let route = route.as_ref().map_or(req.uri().path(), |r| r.as_str());
    let needs = required(req.method(), route);
    // Without tokens the server trusts whoever reaches it (loopback only): the caller is "-".
    let name: &str = match &state.tokens {
        None => "-",
        Some(tokens) => {
            let Some(token) = tokens.find(req.headers()) else {
                return ApiError::new(
                    sked::api::ErrorCode::Unauthorized,
                    "missing or wrong API token: send Authorization: Bearer <token>",
                )
                .into_response();
            };
            if !token.allows(needs) {
                return ApiError::new(
                    sked::api::ErrorCode::Forbidden,
                    format!(
                        "token {} lacks the {} scope that {} {route} needs",
                        token.name,
                        needs.as_str(),
                        req.method()
                    ),
                )
                .into_response();
            }
            &token.name
        }
    };
    if needs != Scope::Admin {
        return next.run(req).await;
    }
    // An operator's change: logged once answered (reads and the worker protocol are not).
    let (name, method, path) = (
        name.to_owned(),
        req.method().clone(),
        req.uri().path().to_owned(),
    );
    let response = next.run(req).await;
    tracing::info!(
        target: "sked::audit",
        token = %name,
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        "api change"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The routes of the API, as `(method, path)`, from the OpenAPI document.
    fn routes() -> Vec<(Method, String)> {
        let doc = crate::openapi();
        let mut routes = Vec::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                if let Ok(m) = method.to_uppercase().parse::<Method>() {
                    routes.push((m, path.clone()));
                }
            }
        }
        routes
    }

    #[test]
    fn every_named_route_exists_and_every_route_needs_a_scope() {
        let routes = routes();
        for path in ENQUEUE.iter().chain(&WORK) {
            assert!(routes.iter().any(|(_, p)| p == path), "{path} is no route");
        }
        let scope = |m: Method, p: &str| required(&m, p);
        assert_eq!(scope(Method::POST, "/v1/tasks"), Scope::Enqueue);
        assert_eq!(scope(Method::GET, "/v1/tasks"), Scope::Read);
        assert_eq!(scope(Method::POST, "/v1/tasks/{id}/cancel"), Scope::Admin);
        assert_eq!(scope(Method::POST, "/v1/claim"), Scope::Work);
        assert_eq!(scope(Method::GET, "/v1/work"), Scope::Work);
        assert_eq!(scope(Method::POST, "/v1/queues/{name}/pause"), Scope::Admin);
        assert_eq!(scope(Method::DELETE, "/v1/schedules/{name}"), Scope::Admin);
        assert_eq!(scope(Method::DELETE, "/v1/tasks/{id}"), Scope::Admin);
        // Reads change nothing; every change is admin's but adding tasks and working them.
        for (m, p) in &routes {
            let needs = required(m, p);
            if matches!(*m, Method::GET | Method::HEAD) {
                assert!(matches!(needs, Scope::Read | Scope::Work), "{m} {p}");
            } else {
                assert_ne!(needs, Scope::Read, "{m} {p}");
            }
        }
    }

    #[test]
    fn tokens_files_are_checked_line_by_line() {
        let tokens = Tokens::parse(
            "# team tokens\n\nci:enqueue,read:0123456789abcdef\nops:admin:abcdef0123456789:x\n",
        )
        .unwrap();
        let bearer = |s: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {s}").parse().unwrap(),
            );
            h
        };
        let ci = tokens.find(&bearer("0123456789abcdef")).unwrap();
        assert!(ci.allows(Scope::Enqueue) && ci.allows(Scope::Read) && !ci.allows(Scope::Admin));
        let ops = tokens.find(&bearer("abcdef0123456789:x")).unwrap();
        assert!(ops.allows(Scope::Work), "admin allows everything");
        assert!(tokens.find(&bearer("0123456789abcdeX")).is_none());
        assert!(!format!("{ops:?}").contains("abcdef"), "no secret in Debug");
        for (text, says) in [
            ("ci:enqueue:short", "at least 16"),
            ("ci:deploy:0123456789abcdef", "unknown scope"),
            ("c i:read:0123456789abcdef", "invalid token name"),
            ("ci:read", "NAME:SCOPES:SECRET"),
            (
                "a:read:0123456789abcdef\na:work:fedcba9876543210",
                "named twice",
            ),
            (
                "a:read:0123456789abcdef\nb:work:0123456789abcdef",
                "secret of another",
            ),
            ("# nothing", "no token"),
        ] {
            let e = Tokens::parse(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}
