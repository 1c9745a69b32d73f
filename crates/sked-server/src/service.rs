//! [`HttpService`]: the HTTP API as a part of a [`sked::Node`], served on a bound listener
//! until the node stops.

use std::sync::Arc;

use sked::Engine;
use sked::node::{Service, ServiceFuture, Stop};

use crate::connections::{self, Limits};
use crate::{AppState, Tokens, router};

/// The HTTP API on a listener, as a part of a [`sked::Node`].
#[derive(Debug)]
pub struct HttpService {
    listener: tokio::net::TcpListener,
    tokens: Option<Arc<Tokens>>,
    limits: Limits,
}

impl HttpService {
    /// Serves on `listener` (bound already, so that a busy address fails before the node
    /// starts). With a token, every request but `/healthz` must carry it (an `admin` token).
    pub fn new(listener: tokio::net::TcpListener, token: Option<String>) -> HttpService {
        HttpService {
            listener,
            tokens: token
                .filter(|t| !t.is_empty())
                .map(|t| Arc::new(Tokens::admin(&t))),
            limits: Limits::default(),
        }
    }

    /// Accepts these tokens, each with its scopes (see [`Tokens`]), instead of one.
    pub fn tokens(mut self, tokens: Tokens) -> HttpService {
        self.tokens = Some(Arc::new(tokens));
        self
    }

    /// Bounds on the connections it keeps ([`Limits::default`] unless set).
    pub fn limits(mut self, limits: Limits) -> HttpService {
        self.limits = limits;
        self
    }
}

impl Service for HttpService {
    fn name(&self) -> &'static str {
        "http"
    }

    fn run(self: Box<Self>, engine: Engine, stop: Stop) -> ServiceFuture {
        let HttpService {
            listener,
            tokens,
            limits,
        } = *self;
        let app = router(AppState {
            engine,
            tokens,
            max_wait: limits.max_wait,
        });
        Box::pin(async move {
            connections::serve(listener, app, limits, stop.wait()).await;
            Ok(())
        })
    }
}

/// Serves the API on `listener` within the default [`Limits`] until `shutdown` resolves, then
/// lets requests in flight end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> sked::Result<()> {
    connections::serve(listener, router(state), Limits::default(), shutdown).await;
    Ok(())
}
