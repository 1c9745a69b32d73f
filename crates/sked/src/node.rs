//! [`Node`]: one sked process's parts composed — the store, the engine, maintenance, an
//! optional worker and optional services (the HTTP API of `sked-server`) — with one graceful
//! shutdown. `sked server`, `sked worker`, `sked bench` and embedding services all start one.
//!
//! Shutdown order: every part is told at once; the worker finishes or gives back what it
//! holds (within its grace), maintenance gives the leader lease up, services get a few
//! seconds to end their requests (a long-polling claim may hold a connection open).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jiff::SignedDuration;
use sked_core::{Clock, SystemClock};
use sked_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::maintenance::{self, MaintenanceConfig};
use crate::worker::{Worker, WorkerReport};
use crate::{Client, Engine, EngineConfig, Error, Result};

/// How long services get to end after the node was told to stop.
const SERVICE_GRACE: Duration = Duration::from_secs(5);

/// A future a service runs as.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A part of a node that runs beside the engine until the node stops: the HTTP API
/// (`sked_server::HttpService`), say.
pub trait Service: Send + 'static {
    /// Its name, for logs.
    fn name(&self) -> &'static str;

    /// Runs on `engine` until `stop` resolves, then ends (ending early is an error only if
    /// it returns one).
    fn run(self: Box<Self>, engine: Engine, stop: Stop) -> ServiceFuture;
}

/// Resolves when the node is told to stop. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Waits for the stop.
    pub async fn wait(mut self) {
        let _ = self.0.wait_for(|s| *s).await;
    }
}

type WorkerSetup = Box<dyn FnOnce(Worker) -> Worker + Send>;

enum Source {
    Url(String),
    Store(Arc<dyn Store>),
}

/// Builds a [`Node`]; see [`Node::builder`].
#[must_use = "a builder does nothing until `start`"]
pub struct NodeBuilder {
    source: Source,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    maintenance: Option<MaintenanceConfig>,
    worker: Option<WorkerSetup>,
    worker_runtime: Option<Duration>,
    services: Vec<Box<dyn Service>>,
}

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("config", &self.config)
            .field("maintenance", &self.maintenance)
            .field("worker", &self.worker.is_some())
            .field("services", &self.services.len())
            .finish_non_exhaustive()
    }
}

impl NodeBuilder {
    /// Works on the store this database URL names ([`crate::open_store`]); the default is
    /// `sqlite://sked.db`.
    pub fn db(mut self, url: impl Into<String>) -> NodeBuilder {
        self.source = Source::Url(url.into());
        self
    }

    /// Works on a store opened already.
    pub fn store(mut self, store: Arc<dyn Store>) -> NodeBuilder {
        self.source = Source::Store(store);
        self
    }

    /// The engine's settings (node id, task lease).
    pub fn config(mut self, config: EngineConfig) -> NodeBuilder {
        self.config = config;
        self
    }

    /// The task lease TTL, and the maintenance settings that follow it
    /// ([`MaintenanceConfig::for_lease_ttl`]) unless set otherwise afterwards.
    pub fn lease_ttl(mut self, ttl: SignedDuration) -> NodeBuilder {
        self.config.lease_ttl = ttl;
        if self.maintenance.is_some() {
            self.maintenance = Some(MaintenanceConfig::for_lease_ttl(ttl));
        }
        self
    }

    /// This machine's clock (the system clock by default). On a shared database it is
    /// corrected to the database server's clock; tests pass a manual clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> NodeBuilder {
        self.clock = clock;
        self
    }

    /// Maintenance settings. Every node takes part in maintenance unless told
    /// [`NodeBuilder::without_maintenance`]: the one holding the leader lease fires
    /// schedules, rescues expired leases and prunes, so any set of nodes, workers only
    /// included, keeps schedules firing.
    pub fn maintenance(mut self, config: MaintenanceConfig) -> NodeBuilder {
        self.maintenance = Some(config);
        self
    }

    /// No maintenance on this node: another node (a `sked server`, say) does it. Without any
    /// node doing it, schedules never fire and expired leases are never rescued.
    pub fn without_maintenance(mut self) -> NodeBuilder {
        self.maintenance = None;
        self
    }

    /// Runs a worker on this node: `setup` gets one on the node's [`Client`], named
    /// `<node id>-worker` (the node itself shows as a node in the list of workers), and adds
    /// handlers and settings.
    pub fn worker(mut self, setup: impl FnOnce(Worker) -> Worker + Send + 'static) -> NodeBuilder {
        self.worker = Some(Box::new(setup));
        self
    }

    /// The worker runs for at most this long ([`Worker::run_for`]); when it ends, the node
    /// ends too.
    pub fn worker_runtime(mut self, max: Duration) -> NodeBuilder {
        self.worker_runtime = Some(max);
        self
    }

    /// Runs a service beside the engine, such as the HTTP API.
    pub fn service(mut self, service: impl Service) -> NodeBuilder {
        self.services.push(Box::new(service));
        self
    }

    /// Opens the store, corrects the clock to the database's, and starts every part.
    pub async fn start(self) -> Result<Node> {
        let store = match self.source {
            Source::Url(url) => crate::open_store(&url).await?,
            Source::Store(store) => store,
        };
        let clock = crate::node_clock(&store, self.clock).await?;
        let engine = Engine::with_clock(store, clock, self.config);
        let (stop_tx, stop_rx) = watch::channel(false);
        let maintenance = self
            .maintenance
            .map(|config| tokio::spawn(maintenance::run(engine.clone(), config, stop_rx.clone())));
        let worker = self.worker.map(|setup| {
            let id = format!("{}-worker", engine.config().node_id);
            let worker = setup(Worker::new(Client::embedded(engine.clone())).id(id));
            let stop = Stop(stop_rx.clone()).wait();
            match self.worker_runtime {
                Some(max) => tokio::spawn(worker.run_for(max, stop)),
                None => tokio::spawn(worker.run(stop)),
            }
        });
        let services = self
            .services
            .into_iter()
            .map(|s| {
                let name = s.name();
                (
                    name,
                    tokio::spawn(s.run(engine.clone(), Stop(stop_rx.clone()))),
                )
            })
            .collect();
        Ok(Node {
            engine,
            stop: stop_tx,
            maintenance,
            worker,
            services,
        })
    }
}

/// A running node: its engine, maintenance, worker and services. Stop it with
/// [`Node::shutdown`] or [`Node::run_until`]; dropping it stops nothing.
#[derive(Debug)]
pub struct Node {
    engine: Engine,
    stop: watch::Sender<bool>,
    maintenance: Option<JoinHandle<()>>,
    worker: Option<JoinHandle<Result<WorkerReport>>>,
    services: Vec<(&'static str, JoinHandle<Result<()>>)>,
}

impl Node {
    /// A builder: SQLite at `sked.db`, default settings, maintenance on, no worker, no
    /// services.
    pub fn builder() -> NodeBuilder {
        NodeBuilder {
            source: Source::Url("sqlite://sked.db".into()),
            config: EngineConfig::default(),
            clock: Arc::new(SystemClock),
            maintenance: Some(MaintenanceConfig::default()),
            worker: None,
            worker_runtime: None,
            services: Vec::new(),
        }
    }

    /// The node's engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// A client on the node's engine.
    pub fn client(&self) -> Client {
        Client::embedded(self.engine.clone())
    }

    /// Runs until `signal` resolves (Ctrl-C, say), the worker ends by itself (a bounded
    /// run, or an error), or a service fails; then shuts down. Returns the worker's report,
    /// if it has one, or the first error.
    pub async fn run_until(
        mut self,
        signal: impl Future<Output = ()> + Send,
    ) -> Result<Option<WorkerReport>> {
        // Services end only when told, unless they fail.
        let no_services = self.services.is_empty();
        let handles = self.services.iter_mut().map(|(_, h)| h);
        let failed = async {
            if no_services {
                return std::future::pending().await;
            }
            let (result, i, _) = futures_util::future::select_all(handles).await;
            (i, result)
        };
        let worker_done = async {
            match self.worker.as_mut() {
                Some(w) => Some(w.await),
                None => std::future::pending().await,
            }
        };
        let (early, failed) = tokio::select! {
            _ = signal => (None, None),
            done = worker_done => (done, None),
            failed = failed => (None, Some(failed)),
        };
        if let Some((i, result)) = failed {
            // Its handle is spent: take it out before the others are waited for.
            let (name, _) = self.services.remove(i);
            let error = match join(result) {
                Ok(()) => Error::Internal(format!("the {name} service ended by itself")),
                Err(e) => e,
            };
            tracing::error!(service = name, error = %error, "a service ended; stopping the node");
            self.shutdown().await?;
            return Err(error);
        }
        if let Some(done) = early {
            self.worker = None;
            let report = join(done);
            self.shutdown().await?;
            return report.map(Some);
        }
        self.shutdown_report().await
    }

    /// Tells every part to stop and waits for them (services at most a few seconds).
    pub async fn shutdown(self) -> Result<()> {
        self.shutdown_report().await.map(|_| ())
    }

    async fn shutdown_report(self) -> Result<Option<WorkerReport>> {
        let _ = self.stop.send(true);
        let report = match self.worker {
            Some(w) => Some(join(w.await)?),
            None => None,
        };
        if let Some(m) = self.maintenance {
            let _ = m.await;
        }
        let mut first_error = None;
        for (name, handle) in self.services {
            match tokio::time::timeout(SERVICE_GRACE, handle).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::error!(service = name, error = %e, "service failed");
                    first_error.get_or_insert(e);
                }
                Ok(Err(e)) => tracing::error!(service = name, error = %e, "service panicked"),
                Err(_) => tracing::warn!(service = name, "service did not end in time"),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

fn join<T>(r: std::result::Result<Result<T>, tokio::task::JoinError>) -> Result<T> {
    r.map_err(|e| Error::Internal(format!("a part of the node panicked: {e}")))?
}
