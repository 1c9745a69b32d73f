//! `--otlp-endpoint`: sked's spans exported to an OpenTelemetry collector over OTLP/HTTP
//! (protobuf), batched in the background. The endpoint is the collector's base URL, as
//! `OTEL_EXPORTER_OTLP_ENDPOINT` gives it (`http://collector:4318`); spans go to its
//! `/v1/traces`. The SDK's own variables apply too (`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, …). Requests go through the workspace's reqwest client,
//! spawned on the runtime, since the batch processor exports from a thread of its own.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::{CliError, CliResult};

/// The exporting tracer provider, flushed by [`Otel::shutdown`].
pub(crate) struct Otel {
    provider: SdkTracerProvider,
}

impl Otel {
    /// A provider exporting to `endpoint` (checked: exit 2 when it is not an http(s) URL) and
    /// the [`sked::Telemetry`] that records into it.
    pub(crate) fn start(endpoint: &str) -> CliResult<(Otel, sked::Telemetry)> {
        let base = endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(CliError::usage(format!(
                "invalid --otlp-endpoint {endpoint:?}: expected the collector's http(s) URL, like http://127.0.0.1:4318"
            )));
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(Http::new())
            .with_endpoint(format!("{base}/v1/traces"))
            .build()
            .map_err(|e| CliError::usage(format!("invalid --otlp-endpoint {endpoint:?}: {e}")))?;
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("sked");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let telemetry = sked::Telemetry::new(provider.tracer(sked::telemetry::SCOPE));
        Ok((Otel { provider }, telemetry))
    }

    /// Exports what is buffered and stops (off the runtime's threads: the export it waits
    /// for runs on them).
    pub(crate) async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = done {
            tracing::warn!(error = %e, "exporting the last spans failed");
        }
    }
}

/// The OTLP exporter's HTTP client: reqwest on the tokio runtime the process runs.
#[derive(Debug)]
struct Http {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Http {
    fn new() -> Http {
        Http {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Http {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let answer = self
            .runtime
            .spawn(async move {
                let response = client.execute(request).await?;
                let status = response.status();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, body))
            })
            .await??;
        let (status, body) = answer;
        Ok(Response::builder().status(status).body(body)?)
    }
}
