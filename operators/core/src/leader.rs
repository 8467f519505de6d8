//! Leader election on a `coordination.k8s.io/v1` Lease, so only one replica of an operator
//! acts on the databases at a time.
//!
//! Expiry is judged the way client-go judges it: by how long *this process* has seen the
//! lease record unchanged, not by comparing the holder's `renewTime` with the local clock, so
//! clock skew between nodes cannot hand leadership to two replicas at once.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt},
};
use tokio::sync::Mutex;

use crate::Error;

/// Timings of the election, as in client-go's defaults.
#[derive(Clone, Debug)]
pub struct LeaseTimings {
    /// How long a lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// The pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// One candidate in the election for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: LeaseTimings,
    observed: Mutex<Option<Observation>>,
}

#[derive(Clone, PartialEq)]
struct Observation {
    record: (Option<String>, Option<MicroTime>),
    seen_at: Instant,
}

impl LeaderElector {
    /// A candidate named `identity` (unique per replica, e.g. the pod name) for the Lease `name`.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, timings: LeaseTimings) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timings,
            observed: Mutex::new(None),
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Waits until this candidate holds the lease.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "acquired leadership");
                    return;
                }
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "leader election attempt failed"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// Renews the lease until renewal fails for longer than the renew deadline, or another
    /// candidate holds it; then returns. The caller must stop acting as leader at once. A
    /// renewal that does not answer (a dead connection, a long queue before the API server) is
    /// given up at the deadline too: a standby takes the lease once it expires, and two
    /// leaders must never act at once.
    pub async fn hold(&self) {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.timings.retry_period).await;
            let left = self.timings.renew_deadline.saturating_sub(last_renewal.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %self.name, "another candidate holds the lease");
                    return;
                }
                Ok(Err(error)) => tracing::warn!(%error, "lease renewal failed"),
                Err(_) => tracing::warn!(lease = %self.name, "lease renewal did not answer"),
            }
            if last_renewal.elapsed() > self.timings.renew_deadline {
                tracing::warn!(lease = %self.name, "could not renew the lease before the deadline");
                return;
            }
        }
    }

    /// Gives the lease up so a standby takes over without waiting for expiry. Best effort.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        if let Err(error) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
            tracing::warn!(%error, "could not release the lease");
        }
    }

    /// One attempt: creates the lease, renews it if held by us, or takes it over once the
    /// holder has let it expire. Returns whether we hold it now. A write conflict means another
    /// candidate moved first, and is answered `false`.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, Error> {
        let lease_error = |source| Error::Lease {
            name: self.name.clone(),
            source,
        };
        let now = MicroTime(Timestamp::now());
        let duration_seconds = i32::try_from(self.timings.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.name).await.map_err(lease_error)? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(source) => Err(lease_error(source)),
            };
        };

        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let held_by_us = holder.as_deref() == Some(self.identity.as_str());
        if !held_by_us && holder.is_some() && !self.expired(spec).await {
            return Ok(false);
        }
        if !held_by_us {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(duration_seconds);
        match self
            .api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(lease_error(source)),
        }
    }

    /// Whether the other holder's record has stayed unchanged, as seen by us, for longer than
    /// the lease duration it declares.
    async fn expired(&self, spec: &LeaseSpec) -> bool {
        let record = (spec.holder_identity.clone(), spec.renew_time.clone());
        let declared = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let mut observed = self.observed.lock().await;
        match observed.as_ref() {
            Some(seen) if seen.record == record => seen.seen_at.elapsed() > declared,
            _ => {
                *observed = Some(Observation {
                    record,
                    seen_at: Instant::now(),
                });
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{Method, Request, Response};

    /// The API server answers the lease's reads (held by this candidate) but never its
    /// renewal: leadership ends at the renew deadline, not when the request gives up.
    #[tokio::test]
    async fn a_renewal_that_never_answers_ends_leadership_at_the_deadline() {
        let service = tower::service_fn(|request: Request<kube::client::Body>| async move {
            if request.method() != Method::GET {
                futures::future::pending::<()>().await;
            }
            let lease = serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "quorum", "namespace": "ops", "resourceVersion": "1"},
                "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                         "renewTime": MicroTime(Timestamp::now())},
            });
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&lease).unwrap()))
                    .unwrap(),
            )
        });
        let client = Client::new(service, "ops");
        let timings = LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_millis(300),
            retry_period: Duration::from_millis(20),
        };
        let elector = LeaderElector::new(client, "ops", "quorum", "me", timings);
        tokio::time::timeout(Duration::from_secs(5), elector.hold())
            .await
            .expect("leadership given up at the renew deadline");
    }
}
