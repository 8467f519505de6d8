//! Shared machinery of the Quorum operators.
//!
//! Every operator is a level-based control loop with two hands: one shapes Kubernetes objects,
//! the other calls the database's own admin API. This crate holds what all four operators share:
//!
//! - [`availability`]: the availability-aware admin layer (tri-state health, the safety gate,
//!   breakers, timeouts and retries, cached clients);
//! - [`crd`]: resource fragments every operator embeds (storage, pod overrides, backup policy,
//!   destinations, restore source, backup records);
//! - [`naming`]: deterministic object names and the standard `app.kubernetes.io` labels;
//! - [`rbac`]: the rules each operator declares for its generated RBAC;
//! - [`packaging`]: what each operator says about itself to OperatorHub (its kinds' descriptors);
//! - [`pod`]: pieces of pod specs (downward-API environment, mounts, memory volumes, the data
//!   claim, generated passwords);
//! - [`pod_failures`]: member pods that cannot start, reported on their cluster's conditions and events;
//! - [`predecessor`]: what a deleted cluster of the same name left (claims, a StatefulSet), which
//!   holds a new cluster back until it is gone;
//! - [`apply`]: server-side apply under one field manager per operator, with controller owner references;
//! - [`ownership`]: an object under a child's name that the cluster does not control, never
//!   adopted or overwritten, and reported on the cluster;
//! - [`pass`]: one pass shape: typed reasons ([`reasons!`]), decisions, where a pass left the
//!   cluster and its one event, typed records of steps in flight ([`recorded_kinds!`]);
//! - [`conditions`]: `Ready`, `Progressing`, `Degraded` with `observedGeneration` and stable transition times;
//! - [`status`]: reading `status` as stored at the start of a pass, writing it only when it changed;
//! - [`events`]: one shared event recorder with a fixed catalogue of reasons;
//! - [`metrics`] and [`http`]: `/metrics`, `/healthz`, `/readyz`;
//! - [`backup`]: the backup sink, streaming checksummed backups to S3-compatible storage or a directory,
//!   and around it destinations, schedules and the producer-to-sink pipe;
//! - [`leader`]: leader election on a `coordination.k8s.io` Lease;
//! - [`runner`]: the controller runner that ties them together;
//! - [`wakeups`]: requests from the database's own events to reconcile a cluster now, and
//!   [`database_events`], the listeners that hold each member's notification connection open;
//! - [`role_labels`]: the primary/replica label on member pods, which the Services select;
//! - [`rollout`]: which member pods run an older template than their StatefulSet's, and which
//!   member a managed roll restarts next;
//! - [`wipe`]: a member's volume and pod deleted, so it starts again empty and copies its peers;
//! - [`config`] and [`telemetry`]: flags, environment and structured logs.

pub mod apply;
pub mod availability;
pub mod backup;
pub mod cache;
pub mod conditions;
pub mod config;
pub mod crd;
pub mod database_events;
pub mod error;
pub mod events;
pub mod failover;
pub mod freshness;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod naming;
pub mod ownership;
pub mod packaging;
pub mod pass;
pub mod pod;
pub mod pod_failures;
pub mod predecessor;
pub mod rbac;
pub mod recovery;
pub mod repair;
pub mod role_labels;
pub mod rollout;
pub mod runner;
pub mod status;
pub mod telemetry;
pub mod wakeups;
pub mod wipe;

pub use error::{Error, ReconcileError};

/// Chooses the TLS crypto provider for the process (ring), before any client is built.
///
/// Several dependencies enable rustls with different providers (kube with ring, the object
/// store's S3 client with aws-lc-rs); with two compiled in, rustls cannot pick one by itself
/// and refuses to build a TLS client. Idempotent.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
