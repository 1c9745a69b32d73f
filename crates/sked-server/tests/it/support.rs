//! An in-process server (router and engine on a temporary SQLite file) and its calls.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sked_server::{AppState, router};
use tower::ServiceExt;

pub(crate) struct Api {
    app: Router,
    _dir: tempfile::TempDir,
}

pub(crate) fn api(token: Option<&str>) -> Api {
    api_with(|state| AppState {
        tokens: token.map(|t| Arc::new(sked_server::Tokens::admin(t))),
        ..state
    })
}

/// The API with its state as `change` makes it.
pub(crate) fn api_with(change: impl FnOnce(AppState) -> AppState) -> Api {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(sked_sqlite::SqliteStore::open(dir.path().join("sked.db")).unwrap());
    let engine = sked::Engine::new(store, sked::EngineConfig::default());
    Api {
        app: router(change(AppState::new(engine))),
        _dir: dir,
    }
}

impl Api {
    pub(crate) async fn call(
        &self,
        method: &str,
        uri: &str,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        self.call_with(method, uri, body, None).await
    }

    /// The status and body bytes of a request with an optional JSON body, whatever it answers.
    pub(crate) async fn raw(
        &self,
        method: &str,
        uri: &str,
        body: Option<&str>,
    ) -> (StatusCode, Vec<u8>) {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = body.map(|b| Body::from(b.to_string()));
        let req = req.body(body.unwrap_or_else(Body::empty)).unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, bytes.to_vec())
    }

    pub(crate) async fn call_with(
        &self,
        method: &str,
        uri: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req
            .body(
                body.map(|b| Body::from(b.to_string()))
                    .unwrap_or_else(Body::empty),
            )
            .unwrap();
        let resp = self.app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        (status, json)
    }

    pub(crate) async fn task_count(&self) -> usize {
        self.call("GET", "/v1/tasks", None).await.1["tasks"]
            .as_array()
            .unwrap()
            .len()
    }
}

#[track_caller]
pub(crate) fn assert_error(got: (StatusCode, Value), status: StatusCode, code: &str, needle: &str) {
    assert_eq!(got.0, status, "{}", got.1);
    assert_eq!(got.1["error"]["code"], code, "{}", got.1);
    let msg = got.1["error"]["message"].as_str().unwrap();
    assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
}
