//! [`HttpService`]: the HTTP API as a part of a [`sked::Node`], served on a bound listener
//! until the node stops.

use std::sync::Arc;

use sked::Engine;
use sked::node::{Service, ServiceFuture, Stop};

use crate::{AppState, router};

/// The HTTP API on a listener, as a part of a [`sked::Node`].
#[derive(Debug)]
pub struct HttpService {
    listener: tokio::net::TcpListener,
    token: Option<Arc<str>>,
}

impl HttpService {
    /// Serves on `listener` (bound already, so that a busy address fails before the node
    /// starts). With a token, every request but `/healthz` must carry it.
    pub fn new(listener: tokio::net::TcpListener, token: Option<String>) -> HttpService {
        HttpService {
            listener,
            token: token.filter(|t| !t.is_empty()).map(Arc::from),
        }
    }
}

impl Service for HttpService {
    fn name(&self) -> &'static str {
        "http"
    }

    fn run(self: Box<Self>, engine: Engine, stop: Stop) -> ServiceFuture {
        let HttpService { listener, token } = *self;
        Box::pin(serve(listener, AppState { engine, token }, stop.wait()))
    }
}

/// Serves the API on `listener` until `shutdown` resolves, then lets requests in flight end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> sked::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| sked::Error::Internal(format!("the HTTP server failed: {e}")))
}
