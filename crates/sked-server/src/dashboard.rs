//! The dashboard: three static files compiled into the binary, served at `/`. The page reads and
//! acts only through the public API (`/v1`), with the same token as any client.
//!
//! The files are sent with a Content-Security-Policy that allows scripts and styles from this
//! server only (no inline script, no other origins), so even a value that slipped through as
//! markup could not run script; the page itself only ever writes server values as text.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("../dashboard/index.html");
const APP_JS: &str = include_str!("../dashboard/app.js");
const APP_CSS: &str = include_str!("../dashboard/app.css");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            // The files change with the binary; a restart must not serve a stale page.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/",
    operation_id = "dashboard",
    summary = "The dashboard (HTML). It holds no data: it reads and acts through /v1 with the same token as any client.",
    security(()),
    responses((status = 200, description = "OK", body = String, content_type = "text/html"))
)]
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

#[utoipa::path(
    get,
    path = "/dashboard/app.js",
    operation_id = "dashboardScript",
    summary = "The dashboard's script",
    security(()),
    responses((status = 200, description = "OK", body = String, content_type = "text/javascript"))
)]
pub(crate) async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

#[utoipa::path(
    get,
    path = "/dashboard/app.css",
    operation_id = "dashboardStyle",
    summary = "The dashboard's style sheet",
    security(()),
    responses((status = 200, description = "OK", body = String, content_type = "text/css"))
)]
pub(crate) async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}
