//! The controller runner: everything between `main` and an operator's reconcile function.
//!
//! [`Runtime`] owns what one operator process shares: the API client, the field manager, the
//! event publisher, metrics and readiness, the HTTP endpoint, leader election and shutdown.
//! [`Runtime::controller`] turns a reconcile function into a running controller that
//!
//! - watches the custom resource, skipping updates that leave `metadata.generation` and the
//!   annotations unchanged (status writes, including our own, do not wake it);
//! - watches the StatefulSets, Services, PodDisruptionBudgets, Secrets and ConfigMaps the
//!   operator manages (selected by `app.kubernetes.io/managed-by`), so a deleted or edited child
//!   is put back, and keeps them, with the operator's pods for a cluster controller, in the
//!   [`Cache`] that passes read instead of the API server (a controller of objects that own
//!   nothing, [`Runtime::leaf_controller`], watches only its own kind);
//! - counts and times every reconcile, and retries failures with jittered exponential backoff,
//!   except permanent ones (an invalid spec), which wait for the resource to change.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Debug,
    sync::Arc,
    time::Duration,
};

use futures::{StreamExt, future::BoxFuture};
use k8s_openapi::{
    NamespaceResourceScope,
    api::{
        apps::v1::StatefulSet,
        core::v1::{ConfigMap, Pod, Secret, Service},
        policy::v1::PodDisruptionBudget,
    },
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{Controller, Predicate, WatchStreamExt, controller::Action, predicates, reflector, watcher},
};
use rand::Rng;
use serde::Serialize;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::{
    Error, ReconcileError,
    apply::Applier,
    cache::{Cache, Cacheable},
    config::OperatorConfig,
    events::EventPublisher,
    http::{self, Phase, Readiness},
    leader::{LeaderElector, LeaseTimings},
    metrics::Metrics,
    ownership,
    pass::{ClusterObject, last_drill_digest},
    pod_failures,
    wakeups::Wakeups,
};

pub use crate::availability::member_clients::AdminCalls;

/// What a cluster controller's state does once one of its clusters is gone: drop what it keeps
/// per cluster (clients, breakers, credentials), so that memory and the open-circuit gauge
/// follow the clusters that exist. `key` is `namespace/name`.
pub trait ForgetsClusters: Send + Sync + 'static {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> BoxFuture<'a, ()>;
}

/// Called with `namespace/name` when a controller learns that its object is gone.
type OnGone = Arc<dyn Fn(String) -> BoxFuture<'static, ()> + Send + Sync>;

/// What every reconcile receives: the shared machinery plus the operator's own `state`
/// (for example its cache of database admin clients).
pub struct Context<S> {
    pub client: Client,
    /// The watch caches of the operator's own objects (empty outside a [`Runtime`]: every
    /// lookup then reads from the API server).
    pub cache: Cache,
    pub applier: Applier,
    pub events: EventPublisher,
    pub metrics: Arc<Metrics>,
    pub state: S,
    failures: Mutex<HashMap<String, u32>>,
}

impl<S> Context<S> {
    /// A context for reconciles run outside a [`Runtime`] (tests drive reconcile directly).
    pub fn new(client: Client, operator: &str, metrics: Arc<Metrics>, state: S) -> Self {
        Self {
            cache: Cache::default(),
            applier: Applier::new(client.clone(), operator),
            events: EventPublisher::new(client.clone(), operator, None),
            client,
            metrics,
            state,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

/// What a controller watches besides its own kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Nothing: its objects own none.
    Leaf,
    /// The operator's StatefulSets, Services, PodDisruptionBudgets, Secrets and ConfigMaps, kept
    /// in the cache; a change to one wakes its owner.
    Owner,
    /// As `Owner`, and the pods labelled `app.kubernetes.io/name` with this value (kept in
    /// the cache, reported on after every pass). Pod templates do not carry the operator's
    /// name, so that an operator release never changes them.
    Cluster(&'static str),
}

/// What else of a watched resource than its generation and annotations wakes its controller:
/// a digest of it, a pass whenever the digest changes.
type Trigger<K> = fn(&K) -> Option<u64>;

/// Nothing else: a new generation or new annotations only.
fn no_more_triggers<K>(_: &K) -> Option<u64> {
    None
}

/// The label every object of an operator carries but its pods: its watches select by it.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The label of the application a pod runs (`etcd`, `mysql`, ...): the pod watch selects by it.
const APP_NAME: &str = "app.kubernetes.io/name";

impl<S> Context<S> {
    /// `namespace/name` of kind `K`: the cached copy when the cache holds it current, else as
    /// the API server has it ([`Cache::get_or_read`]).
    ///
    /// # Errors
    /// When the API server cannot be read.
    pub async fn read<K: Cacheable>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<K>>, kube::Error> {
        self.cache.get_or_read(&self.client, namespace, name).await
    }

    /// The pods in `namespace` that carry every label of `selector`, from the cache when it
    /// holds them all current ([`Cache::list_or_read`]: a cluster controller's pod watch holds
    /// those of its application, so `selector` names it).
    ///
    /// # Errors
    /// When the API server cannot be read.
    pub async fn pods(
        &self,
        namespace: &str,
        selector: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Pod>>, kube::Error> {
        self.cache.list_or_read(&self.client, namespace, selector).await
    }
}

/// Retry delays for failed reconciles.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub first: Duration,
    pub max: Duration,
}

impl Default for RetryPolicy {
    /// Capped at 30 s: a reconcile that failed while its members were down (a total outage
    /// fails every pass) must not wait minutes once they are back, and a member coming back
    /// may change no object the controller watches (Pods are not watched for status).
    fn default() -> Self {
        Self {
            first: Duration::from_millis(500),
            max: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based): doubling from `first`, capped at
    /// `max`, with up to 20% random jitter so failing objects do not retry in lockstep.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self
            .first
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.max);
        let jitter = rand::rng().random_range(0.0..0.2);
        base.mul_f64(1.0 + jitter).min(self.max)
    }
}

/// Why [`Runtime::run`] returned.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("could not serve the metrics endpoint: {0}")]
    Http(#[source] std::io::Error),
    #[error("the API server is not reachable: {0}")]
    ApiServer(#[source] kube::Error),
    #[error("leadership was lost; exiting so a standby takes over")]
    LeadershipLost,
    #[error("the controllers stopped without a shutdown request; exiting so the process is restarted")]
    ControllersStopped,
}

/// One operator process.
pub struct Runtime {
    operator: &'static str,
    config: OperatorConfig,
    client: Client,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    events: EventPublisher,
    shutdown: CancellationToken,
    retry: RetryPolicy,
    lease_timings: LeaseTimings,
    cache: Cache,
}

impl Runtime {
    /// A runtime for the operator named `operator` (its field manager and event reporter).
    pub fn new(operator: &'static str, config: OperatorConfig, client: Client) -> Self {
        crate::install_crypto_provider();
        let events = EventPublisher::new(client.clone(), operator, Some(config.identity()));
        Self {
            operator,
            config,
            client,
            metrics: Arc::new(Metrics::new()),
            readiness: Readiness::default(),
            events,
            shutdown: CancellationToken::new(),
            retry: RetryPolicy::default(),
            lease_timings: LeaseTimings::default(),
            cache: Cache::default(),
        }
    }

    /// Replaces the retry policy (tests shorten it).
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Replaces the leader-election timings (tests shorten them).
    pub fn with_lease_timings(mut self, timings: LeaseTimings) -> Self {
        self.lease_timings = timings;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// A token that, once cancelled, shuts the runtime down as SIGTERM would.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The shared context for this process's reconciles, holding the operator's `state`.
    pub fn context<S>(&self, state: S) -> Arc<Context<S>> {
        Arc::new(Context {
            client: self.client.clone(),
            cache: self.cache.clone(),
            applier: Applier::with_cache(self.client.clone(), self.operator, self.cache.clone()),
            events: self.events.clone(),
            metrics: self.metrics.clone(),
            state,
            failures: Mutex::new(HashMap::new()),
        })
    }

    /// A controller for resources of kind `K`, in every watched namespace, calling `reconcile`.
    /// The returned future runs until shutdown; pass it to [`Runtime::run`].
    pub fn controller<K, S, E, F, Fut>(
        &self,
        context: Arc<Context<S>>,
        reconcile: F,
    ) -> BoxFuture<'static, ()>
    where
        K: Cacheable + Serialize,
        S: Send + Sync + 'static,
        E: ReconcileError,
        F: Fn(Arc<K>, Arc<Context<S>>) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        self.controller_reporting(
            context,
            reconcile,
            (Shape::Owner, no_more_triggers::<K>),
            None,
            None,
        )
    }

    /// A controller for resources of kind `K` that own no objects (backups): as
    /// [`Runtime::controller`], without watching any other kind.
    pub fn leaf_controller<K, S, E, F, Fut>(
        &self,
        context: Arc<Context<S>>,
        reconcile: F,
    ) -> BoxFuture<'static, ()>
    where
        K: Cacheable + Serialize,
        S: Send + Sync + 'static,
        E: ReconcileError,
        F: Fn(Arc<K>, Arc<Context<S>>) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        self.controller_reporting(
            context,
            reconcile,
            (Shape::Leaf, no_more_triggers::<K>),
            None,
            None,
        )
    }

    /// A controller for database clusters whose pods are labelled `app.kubernetes.io/name` with
    /// `app`: as [`Runtime::controller`], with those pods kept in the cache, and after every pass
    /// the cluster's pods that cannot start are reported on it ([`crate::pod_failures`]); once a
    /// cluster is gone, the state forgets it ([`ForgetsClusters`]). With `wakeups`, a cluster is
    /// also reconciled whenever they name it: the database's own events (a failover its
    /// processes decided) reach the pass at once instead of at the next scheduled one
    /// ([`crate::wakeups`]).
    pub fn cluster_controller<K, S, E, F, Fut>(
        &self,
        context: Arc<Context<S>>,
        reconcile: F,
        app: &'static str,
        wakeups: Option<Wakeups>,
    ) -> BoxFuture<'static, ()>
    where
        K: Cacheable + Serialize + ClusterObject,
        S: ForgetsClusters,
        E: ReconcileError,
        F: Fn(Arc<K>, Arc<Context<S>>) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let on_gone = forgetting(&context);
        self.controller_reporting(
            context,
            reconcile,
            (Shape::Cluster(app), last_drill_digest::<K>),
            wakeups,
            Some(on_gone),
        )
    }

    fn controller_reporting<K, S, E, F, Fut>(
        &self,
        context: Arc<Context<S>>,
        reconcile: F,
        (shape, also_on): (Shape, Trigger<K>),
        wakeups: Option<Wakeups>,
        on_gone: Option<OnGone>,
    ) -> BoxFuture<'static, ()>
    where
        K: Cacheable + Serialize,
        S: Send + Sync + 'static,
        E: ReconcileError,
        F: Fn(Arc<K>, Arc<Context<S>>) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let scopes: Vec<Option<String>> = if self.config.watch_namespaces.is_empty() {
            vec![None]
        } else {
            // Each namespace once: two watches of one would deliver out of step.
            let unique: std::collections::BTreeSet<&String> = self.config.watch_namespaces.iter().collect();
            unique.into_iter().cloned().map(Some).collect()
        };
        let controllers = scopes.into_iter().map(|namespace| {
            self.controller_in(
                namespace,
                context.clone(),
                reconcile.clone(),
                (shape, also_on),
                wakeups.clone(),
                on_gone.clone(),
            )
        });
        // One namespace's controller ending is this controller ending: the runner decides
        // whether that was asked for (a shutdown, when the others finish their reconciles
        // too) or a failure.
        let first_to_end = futures::future::select_all(controllers);
        let shutdown = self.shutdown.clone();
        Box::pin(async move {
            let (_, _, others) = first_to_end.await;
            if shutdown.is_cancelled() {
                futures::future::join_all(others).await;
            }
        })
    }

    fn controller_in<K, S, E, F, Fut>(
        &self,
        namespace: Option<String>,
        context: Arc<Context<S>>,
        reconcile: F,
        (shape, also_on): (Shape, Trigger<K>),
        wakeups: Option<Wakeups>,
        on_gone: Option<OnGone>,
    ) -> BoxFuture<'static, ()>
    where
        K: Cacheable + Serialize,
        S: Send + Sync + 'static,
        E: ReconcileError,
        F: Fn(Arc<K>, Arc<Context<S>>) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let client = self.client.clone();
        let api = |client: Client| -> Api<K> {
            match &namespace {
                Some(ns) => Api::namespaced(client, ns),
                None => Api::all(client),
            }
        };
        fn owned<C>(client: &Client, namespace: &Option<String>) -> Api<C>
        where
            C: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
        {
            match namespace {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let managed = BTreeMap::from([(MANAGED_BY.to_string(), self.operator.to_string())]);
        let (reader, writer) = reflector::store();
        // The controller's own store serves lookups too (a cluster's scheduled backups, read
        // by the cluster's pass, are the backup controller's objects).
        let listed = self
            .cache
            .keep(reader.clone(), namespace.clone(), BTreeMap::new());
        let trigger = watcher(api(client.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .inspect(move |event| {
                crate::cache::mark_listed(&listed, event);
                crate::freshness::observe(event);
            })
            .applied_objects()
            .predicate_filter(
                predicates::generation
                    .combine(predicates::annotations)
                    .combine(also_on),
                Default::default(),
            );
        let controller_name = K::plural(&()).to_string();
        let retry = self.retry;
        let shutdown = self.shutdown.clone();
        let reconcile_name = controller_name.clone();
        let error_name = controller_name.clone();
        let gone_context = context.clone();
        let mut controller = Controller::for_stream(detached(trigger), reader);
        if let Some(wakeups) = wakeups {
            controller = controller.reconcile_on(wakeups.stream::<K>(namespace.clone()));
        }
        // Each kind the resources own: the operator's own objects of it, cached for the passes,
        // its watch polled apart from the controller.
        type Owner<'a> = (
            &'a Cache,
            &'a Client,
            &'a Option<String>,
            &'a BTreeMap<String, String>,
        );
        fn owned_trigger<C: Cacheable>(
            (cache, client, namespace, managed): Owner<'_>,
        ) -> impl futures::Stream<Item = Result<C, watcher::Error>> + Send + 'static {
            detached(cache.watch(owned::<C>(client, namespace), namespace.clone(), managed.clone()))
        }
        let own: Owner<'_> = (&self.cache, &client, &namespace, &managed);
        if shape == Shape::Leaf {
            // Backups own the Jobs their runs are taken in: a finished one wakes its backup.
            controller = controller.owns_stream(owned_trigger::<k8s_openapi::api::batch::v1::Job>(own));
        } else {
            controller = controller
                .owns_stream(owned_trigger::<StatefulSet>(own))
                .owns_stream(owned_trigger::<Service>(own))
                .owns_stream(owned_trigger::<PodDisruptionBudget>(own))
                .owns_stream(owned_trigger::<Secret>(own))
                .owns_stream(owned_trigger::<ConfigMap>(own));
        }
        // Pods are the StatefulSets' children: kept for the passes to read, not a trigger. The
        // stream never ends by itself, so the controller's end is this future's end.
        let app = match shape {
            Shape::Cluster(app) => Some(app),
            Shape::Leaf | Shape::Owner => None,
        };
        let pods = app.map(|app| {
            let labelled = BTreeMap::from([(APP_NAME.to_string(), app.to_string())]);
            self.cache
                .watch(owned::<Pod>(&client, &namespace), namespace.clone(), labelled)
        });
        let keep_pods = async move {
            if let Some(pods) = pods {
                pods.for_each(|_| futures::future::ready(())).await;
            }
            futures::future::pending::<()>().await
        };
        let concurrency = self.config.max_concurrent_reconciles;
        // The uid each key's passes were last for: what is kept for a cluster (its clients, the
        // accounts made in it, when a member was first heard failing) is kept by `namespace/name`,
        // and a cluster deleted and created again under its name between two passes must not
        // inherit it.
        let last_uid: Arc<std::sync::Mutex<HashMap<String, String>>> = Arc::default();
        let (replaced_gone, replaced_uids) = (on_gone.clone(), last_uid.clone());
        let stream = controller
            .with_config(kube::runtime::controller::Config::default().concurrency(concurrency))
            .graceful_shutdown_on(shutdown.cancelled_owned())
            .run(
            move |object: Arc<K>, context: Arc<Context<S>>| {
                let reconcile = reconcile.clone();
                let controller = reconcile_name.clone();
                let (on_gone, last_uid) = (replaced_gone.clone(), replaced_uids.clone());
                async move {
                    let key = object_key(object.as_ref());
                    if replaced(&last_uid, &key, object.meta().uid.as_deref()) {
                        context.failures.lock().await.remove(&key);
                        if let Some(on_gone) = on_gone {
                            on_gone(key.clone()).await;
                        }
                        tracing::info!(object = %key, "created again under its name; what was kept for the deleted one is forgotten");
                    }
                    if is_paused(object.as_ref()) {
                        tracing::debug!(object = %key, "reconciliation paused");
                        return Ok(Action::await_change());
                    }
                    let started = std::time::Instant::now();
                    let result = reconcile(object.clone(), context.clone()).await;
                    if let Some(app) = app {
                        // A report, never a reason to fail or retry the pass.
                        let reported = pod_failures::report(
                            &context.client,
                            &context.cache,
                            &context.events,
                            object.as_ref(),
                            app,
                        )
                        .await;
                        if let Err(error) = reported {
                            tracing::warn!(object = %key, %error, "could not report failing pods");
                        }
                    }
                    if let Err(error) = &result
                        && let Some(Error::NotOwned(not_owned)) = error.shared()
                    {
                        let reported =
                            ownership::report(&context.client, &context.events, object.as_ref(), not_owned)
                                .await;
                        if let Err(error) = reported {
                            tracing::warn!(object = %key, %error, "could not report an object in the way");
                        }
                    }
                    context.metrics.observe_reconcile(&controller, started.elapsed());
                    match &result {
                        Ok(_) => {
                            context.failures.lock().await.remove(&key);
                        }
                        Err(error) => context.metrics.observe_error(&controller, error.metric_label()),
                    }
                    result
                }
            },
            move |object: Arc<K>, error: &E, context: Arc<Context<S>>| {
                error_policy(object.as_ref(), error, &context, retry, &error_name)
            },
            context,
        );
        let run = stream.for_each(move |result| {
            let (on_gone, context, controller_name, last_uid) = (
                on_gone.clone(),
                gone_context.clone(),
                controller_name.clone(),
                last_uid.clone(),
            );
            async move {
                match result {
                    Ok((object, _)) => {
                        tracing::debug!(controller = %controller_name, object = %object, "reconciled")
                    }
                    // A pass that came due (a requeue, an owned object's deletion) for an object
                    // deleted meanwhile: the object is gone, and so is what was kept for it.
                    Err(kube::runtime::controller::Error::ObjectNotFound(object)) => {
                        let namespace = object.namespace.clone().unwrap_or_default();
                        crate::freshness::forget::<K>(&namespace, &object.name);
                        let key = format!("{namespace}/{}", object.name);
                        if let Ok(mut uids) = last_uid.lock() {
                            uids.remove(&key);
                        }
                        context.failures.lock().await.remove(&key);
                        if let Some(on_gone) = on_gone {
                            on_gone(key.clone()).await;
                        }
                        tracing::debug!(controller = %controller_name, object = %key, "gone; forgotten");
                    }
                    Err(error) => tracing::warn!(controller = %controller_name, %error, "reconcile failed"),
                }
            }
        });
        Box::pin(async move {
            futures::pin_mut!(run, keep_pods);
            futures::future::select(run, keep_pods).await;
        })
    }

    /// Serves the HTTP endpoint, waits for leadership when election is on, then runs the
    /// controllers until SIGTERM or SIGINT (or [`Runtime::shutdown_token`]) asks them to stop.
    ///
    /// # Errors
    /// [`RunError::LeadershipLost`] when the lease could not be renewed: the process must exit
    /// so it cannot act alongside a new leader. The other variants when start-up fails.
    pub async fn run(self, controllers: Vec<BoxFuture<'static, ()>>) -> Result<(), RunError> {
        let (address, server) = http::bind(
            self.config.metrics_address,
            self.metrics.clone(),
            self.readiness.clone(),
        )
        .await
        .map_err(RunError::Http)?;
        tokio::spawn(server);
        tracing::info!(%address, operator = self.operator, "serving /metrics, /healthz and /readyz");

        self.client
            .apiserver_version()
            .await
            .map_err(RunError::ApiServer)?;

        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            shutdown.cancel();
        });

        let elector = self.config.leader_elect.then(|| {
            LeaderElector::new(
                self.client.clone(),
                &self.config.lease_namespace(),
                &format!("{}-leader", self.operator),
                &self.config.identity(),
                self.lease_timings.clone(),
            )
        });
        // A standby exports 0, so an operator none of whose processes leads is seen.
        self.metrics.set_leading(self.operator, false);
        if let Some(elector) = &elector {
            self.readiness.set(Phase::Standby);
            tokio::select! {
                () = elector.acquire() => {}
                () = self.shutdown.cancelled() => return Ok(()),
            }
        }

        let shutdown = self.shutdown.clone();
        let controllers = async move {
            // Controllers end after a shutdown request; the first one that ends before it has
            // stopped working, whatever the others do. A process with none waits for the request.
            if controllers.is_empty() {
                shutdown.cancelled().await;
                return Ok(());
            }
            let (_, _, others) = futures::future::select_all(controllers).await;
            if !shutdown.is_cancelled() {
                return Err(RunError::ControllersStopped);
            }
            futures::future::join_all(others).await;
            Ok(())
        };
        self.readiness.set(Phase::Running);
        self.metrics.set_leading(self.operator, true);
        let outcome = match &elector {
            Some(elector) => tokio::select! {
                outcome = controllers => outcome,
                () = elector.hold() => Err(RunError::LeadershipLost),
            },
            None => controllers.await,
        };
        self.metrics.set_leading(self.operator, false);
        self.readiness.set(match outcome {
            Err(RunError::ControllersStopped) => Phase::Failed,
            _ => Phase::Stopping,
        });
        if let Err(error) = &outcome {
            tracing::error!(%error, operator = self.operator, "stopping");
        }
        // A lost lease is another's now; otherwise hand it over at once.
        if let Some(elector) = &elector
            && !matches!(outcome, Err(RunError::LeadershipLost))
        {
            elector.release().await;
        }
        outcome
    }
}

/// The API client of an operator process, from its environment (in cluster: its
/// ServiceAccount), sending at most `--api-qps` requests a second on average and `--api-burst`
/// at once: an operator woken for every cluster at the same moment (a restart, a relist) spreads
/// its requests rather than throttle the API server for everyone.
///
/// # Errors
/// When no configuration is found or it is invalid.
pub async fn api_client(config: &OperatorConfig) -> Result<Client, kube::Error> {
    let found = kube::Config::infer().await.map_err(kube::Error::InferConfig)?;
    let burst = u64::from(config.api_burst);
    let window = Duration::from_secs_f64(burst as f64 / f64::from(config.api_qps));
    Ok(kube::client::ClientBuilder::try_from(found)?
        .with_layer(&tower::limit::RateLimitLayer::new(burst, window))
        .build())
}

/// One operator, as its process and its tests both start it: its name, its state (the
/// engine's clients and settings), its clusters' pass and its backups'. What is tested is what
/// is deployed.
pub trait Operator: 'static {
    /// Its field manager, event reporter and `app.kubernetes.io/managed-by`.
    const NAME: &'static str;
    /// The `app.kubernetes.io/name` of its clusters' pods.
    const APP: &'static str;
    /// What its flags (or a test) decide.
    type Settings;
    type State: ForgetsClusters;
    type Cluster: Cacheable + Serialize + ClusterObject;
    type Backup: Cacheable + Serialize;

    /// The state its passes share, its admin calls made as `calls` says and counted in
    /// `metrics`.
    fn state(settings: Self::Settings, calls: AdminCalls, metrics: &Metrics) -> Self::State;

    /// One pass over a cluster.
    fn reconcile(
        cluster: Arc<Self::Cluster>,
        context: Arc<Context<Self::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static;

    /// One pass over a backup.
    fn reconcile_backup(
        backup: Arc<Self::Backup>,
        context: Arc<Context<Self::State>>,
    ) -> impl Future<Output = Result<Action, impl ReconcileError>> + Send + 'static;

    /// One run of a backup in a backup Job's process ([`run_backup_job`]), as its arguments
    /// say (`run`: started when the operator recorded it, beside which member).
    fn run_backup(
        backup: Arc<Self::Backup>,
        context: Arc<Context<Self::State>>,
        run: crate::backup::job::JobRun,
    ) -> impl Future<Output = crate::backup::job::JobOutcome> + Send + 'static;

    /// What wakes a cluster's pass besides its objects changing: the database's own events,
    /// where the operator follows them.
    fn wakeups(_state: &Self::State) -> Option<Wakeups> {
        None
    }

    /// Its controllers: its clusters' passes and its backups'.
    fn controllers(runtime: &Runtime, context: Arc<Context<Self::State>>) -> Vec<BoxFuture<'static, ()>> {
        let wakeups = Self::wakeups(&context.state);
        let clusters = runtime.cluster_controller::<Self::Cluster, _, _, _, _>(
            context.clone(),
            Self::reconcile,
            Self::APP,
            wakeups,
        );
        let backups = runtime.leaf_controller::<Self::Backup, _, _, _, _>(context, Self::reconcile_backup);
        vec![clusters, backups]
    }
}

/// Runs operator `O` as its process does: the API client from the environment, the default
/// admin calls, its controllers until shutdown.
///
/// # Errors
/// As [`api_client`] and [`Runtime::run`].
pub async fn serve<O: Operator>(config: OperatorConfig, settings: O::Settings) -> Result<(), RunError> {
    crate::install_crypto_provider();
    let client = api_client(&config).await.map_err(RunError::ApiServer)?;
    let runtime = Runtime::new(O::NAME, config, client);
    let context = runtime.context(O::state(settings, AdminCalls::default(), runtime.metrics()));
    let controllers = O::controllers(&runtime, context);
    runtime.run(controllers).await
}

/// The process of a backup Job (`<operator> backup-run`, see [`crate::backup::job`]): one run
/// of backup `args.backup` in its own namespace, its outcome written as the container's
/// termination message (and to standard output) for the operator to record. Exits 0 when the
/// run stored its objects, 1 otherwise.
pub async fn run_backup_job<O: Operator>(
    config: OperatorConfig,
    settings: O::Settings,
    args: &crate::backup::job::BackupRunArgs,
) -> ! {
    use crate::backup::job::{JobOutcome, TERMINATION_LOG};
    crate::install_crypto_provider();
    let outcome = async {
        let started: jiff::Timestamp = args.started_at.parse().map_err(|error| JobOutcome::Failed {
            reason: "JobInvalid".into(),
            message: format!("--started-at {}: {error}", args.started_at),
        })?;
        let unreadable = |error: String| JobOutcome::Failed {
            reason: "JobInvalid".into(),
            message: error,
        };
        let namespace = config
            .pod_namespace
            .clone()
            .ok_or_else(|| unreadable("POD_NAMESPACE is not set".into()))?;
        let client = api_client(&config)
            .await
            .map_err(|error| unreadable(format!("the API server: {error}")))?;
        let backups: Api<O::Backup> = Api::namespaced(client.clone(), &namespace);
        let backup = backups
            .get(&args.backup)
            .await
            .map_err(|error| unreadable(format!("reading backup {}: {error}", args.backup)))?;
        if let Some(message) = crate::backup::job::replaced(
            args.backup_uid.as_deref(),
            &args.backup,
            backup.meta().uid.as_deref(),
        ) {
            return Err(JobOutcome::Failed {
                reason: "BackupReplaced".into(),
                message,
            });
        }
        let metrics = Arc::new(Metrics::new());
        let state = O::state(settings, AdminCalls::default(), &metrics);
        let context = Arc::new(Context::new(client, O::NAME, metrics, state));
        let run = crate::backup::job::JobRun {
            started,
            member: args.member.clone(),
        };
        Ok::<_, JobOutcome>(O::run_backup(Arc::new(backup), context, run).await)
    }
    .await
    .unwrap_or_else(|failed| failed);
    let message = outcome.encode();
    if let Err(error) = std::fs::write(TERMINATION_LOG, &message) {
        tracing::warn!(%error, "the termination message could not be written");
    }
    println!("{message}");
    std::process::exit(match outcome {
        JobOutcome::Stored { .. } => 0,
        JobOutcome::Failed { .. } => 1,
    })
}

/// The annotation that pauses reconciliation of one object: while it is `"true"`, the operator
/// takes no step, writes nothing and calls no database for it (a human at work, `kubectl quorum
/// pause`); removing it, or any other value, resumes. Deletion is never held up: children go
/// with their owner references.
pub const PAUSE_ANNOTATION: &str = "quorum.dev/paused";

/// Whether `object` carries [`PAUSE_ANNOTATION`] set to `"true"`.
pub fn is_paused<K: Resource>(object: &K) -> bool {
    object
        .meta()
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PAUSE_ANNOTATION))
        .is_some_and(|value| value == "true")
}

/// Triggers a watch may queue for its controller before it waits for the controller to take them.
const TRIGGERS_QUEUED: usize = 256;

/// `stream`, polled in a task of its own. A controller with every slot busy polls none of its
/// triggers, so a watch polled by the controller stops filling its store and recording what it
/// delivered ([`crate::freshness`]) exactly when passes are waiting for it: a pass that waits for
/// its own write to be delivered would wait for nothing, and read the object instead.
fn detached<T: Send + 'static>(
    stream: impl futures::Stream<Item = T> + Send + 'static,
) -> impl futures::Stream<Item = T> + Send + 'static {
    let (sender, receiver) = tokio::sync::mpsc::channel(TRIGGERS_QUEUED);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            // Until the controller is gone, even while its watch is quiet.
            let item = tokio::select! {
                () = sender.closed() => break,
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            if sender.send(item).await.is_err() {
                break;
            }
        }
    });
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    })
}

/// An object's key, `namespace/name`: the key under which a cluster's clients, credentials
/// and metrics are kept, and under which [`ForgetsClusters`] forgets them.
pub fn object_key<K: Resource>(object: &K) -> String {
    format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any())
}

/// The hook by which a cluster controller tells its state that a cluster is gone.
fn forgetting<S: ForgetsClusters>(context: &Arc<Context<S>>) -> OnGone {
    let context = context.clone();
    Arc::new(move |key: String| {
        let context = context.clone();
        Box::pin(async move {
            context.metrics.forget_cluster(&key);
            context.state.forget_cluster(&key).await
        })
    })
}

/// Records that a pass for `key` is for the object with `uid`, and tells whether the passes
/// before were for another object under that name (deleted and created again).
fn replaced(last_uid: &std::sync::Mutex<HashMap<String, String>>, key: &str, uid: Option<&str>) -> bool {
    let (Some(uid), Ok(mut uids)) = (uid, last_uid.lock()) else {
        return false;
    };
    uids.insert(key.to_string(), uid.to_string())
        .is_some_and(|before| before != uid)
}

fn error_policy<K: Resource, S, E: ReconcileError>(
    object: &K,
    error: &E,
    context: &Context<S>,
    retry: RetryPolicy,
    controller: &str,
) -> Action {
    if error.is_permanent() {
        tracing::warn!(controller, object = %object_key(object), %error, "waiting for the resource to change");
        return Action::await_change();
    }
    // error_policy is synchronous; the lock is only ever held briefly, so try_lock succeeds
    // except under a race with a finishing reconcile, where the first retry delay is fine.
    let attempt = match context.failures.try_lock() {
        Ok(mut failures) => {
            let count = failures.entry(object_key(object)).or_insert(0);
            *count += 1;
            *count
        }
        Err(_) => 1,
    };
    let delay = retry.delay(attempt);
    tracing::warn!(controller, object = %object_key(object), %error, attempt, ?delay, "retrying");
    Action::requeue(delay)
}

async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => futures::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_detached_watch_is_polled_while_its_controller_takes_nothing() {
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = polled.clone();
        let watch = futures::stream::iter(0..10).inspect(move |_| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let mut triggers = Box::pin(detached(watch));
        // The controller takes nothing (every slot busy); the watch goes on by itself.
        for _ in 0..1_000 {
            if polled.load(std::sync::atomic::Ordering::SeqCst) == 10 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(polled.load(std::sync::atomic::Ordering::SeqCst), 10);
        // And the controller still gets every trigger, in order.
        let mut taken = Vec::new();
        while let Some(item) = triggers.next().await {
            taken.push(item);
        }
        assert_eq!(taken, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn retry_delay_doubles_with_bounded_jitter_and_caps() {
        let policy = RetryPolicy {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        for attempt in 1..=5u32 {
            let base = Duration::from_secs(1 << (attempt - 1));
            let delay = policy.delay(attempt);
            assert!(
                delay >= base && delay <= base.mul_f64(1.2),
                "attempt {attempt}: {delay:?}"
            );
        }
        assert_eq!(policy.delay(30), Duration::from_secs(60));
    }

    #[test]
    fn a_reconcile_failing_through_an_outage_is_still_retried_every_30_seconds() {
        let policy = RetryPolicy::default();
        for attempt in [10, 17, 100, u32::MAX] {
            assert!(
                policy.delay(attempt) <= Duration::from_secs(30),
                "attempt {attempt}: {:?}",
                policy.delay(attempt)
            );
        }
    }

    #[test]
    fn only_a_true_pause_annotation_pauses() {
        let with = |value: Option<&str>| {
            let mut map = k8s_openapi::api::core::v1::ConfigMap::default();
            map.metadata.annotations =
                value.map(|value| [(PAUSE_ANNOTATION.to_string(), value.to_string())].into());
            is_paused(&map)
        };
        assert!(with(Some("true")));
        assert!(!with(Some("false")));
        assert!(!with(Some("yes")));
        assert!(!with(None));
    }
}
