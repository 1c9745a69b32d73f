//! Protection against other web sites: cross-site requests that change something, and DNS
//! rebinding while no token is set.
//!
//! - A request that is not GET, HEAD or OPTIONS and that a browser marks as coming from another
//!   site is refused with 403: `Sec-Fetch-Site` other than `same-origin` or `none`, or, from
//!   browsers that do not send it, an `Origin` whose host differs from `Host`. Clients that are
//!   not browsers (the CLI, SDKs, curl) send neither header and are not affected. This is the
//!   check Go's `http.CrossOriginProtection` makes; it needs no token or cookie in the page.
//! - Without a token the server trusts whoever reaches it, which is only safe on loopback. A
//!   page on another site could still reach it by pointing its own host name at 127.0.0.1 (DNS
//!   rebinding); so without a token, a `Host` that is not an IP address, `localhost` or a name
//!   under `.localhost` is refused.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::{ApiError, AppState};

pub(crate) async fn same_site(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    if state.tokens.is_none()
        && let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok())
        && !is_local_host(host)
    {
        return forbidden(&format!(
            "host {host:?} is not a loopback name; a server reached by other names needs --token"
        ));
    }
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && is_cross_site(headers) {
        return forbidden(
            "cross-site request refused: this server only accepts changes from its own pages or from API clients",
        );
    }
    next.run(req).await
}

fn forbidden(message: &str) -> Response {
    ApiError::new(sked::api::ErrorCode::Forbidden, message).into_response()
}

fn is_cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return !matches!(site.to_str(), Ok("same-origin" | "none"));
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    // `Origin` is scheme://host[:port]; "null" (sandboxed or file pages) never matches.
    let origin_host = origin.split_once("://").map(|(_, rest)| rest);
    origin_host.is_none_or(|o| !o.eq_ignore_ascii_case(host))
}

/// `Host` without its port is an IP address, `localhost`, or a name under `.localhost`.
pub(crate) fn is_local_host(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        // [v6] or [v6]:port
        let ip = rest.split(']').next().unwrap_or("");
        return ip.parse::<std::net::Ipv6Addr>().is_ok();
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_hosts() {
        for h in [
            "127.0.0.1:7070",
            "localhost",
            "LOCALHOST:80",
            "app.localhost:3000",
            "[::1]:7070",
            "10.1.2.3",
        ] {
            assert!(is_local_host(h), "{h}");
        }
        for h in [
            "evil.example:7070",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "[evil]:1",
        ] {
            assert!(!is_local_host(h), "{h}");
        }
    }

    #[test]
    fn cross_site() {
        let hm = |pairs: &[(&'static str, &'static str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(*k, v.parse().unwrap());
            }
            m
        };
        assert!(
            !is_cross_site(&hm(&[])),
            "no browser headers: an API client"
        );
        assert!(!is_cross_site(&hm(&[("sec-fetch-site", "same-origin")])));
        assert!(is_cross_site(&hm(&[("sec-fetch-site", "cross-site")])));
        assert!(is_cross_site(&hm(&[("sec-fetch-site", "same-site")])));
        assert!(!is_cross_site(&hm(&[
            ("origin", "http://127.0.0.1:7070"),
            ("host", "127.0.0.1:7070")
        ])));
        assert!(is_cross_site(&hm(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:7070")
        ])));
        assert!(is_cross_site(&hm(&[
            ("origin", "null"),
            ("host", "127.0.0.1:7070")
        ])));
    }
}
