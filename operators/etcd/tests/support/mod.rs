//! Test support: [`operator`] runs the operator in-process; [`Harness`] is a driver that plays
//! the StatefulSet for real etcd processes: it runs the operator's own
//! observe -> decide -> execute loop, and starts or stops a process where the reconciler
//! would raise or lower the StatefulSet.

pub mod operator;

/// Waits until the cluster `name` is Ready with `members` started voting members, and returns
/// its status.
pub async fn ready_with(
    clusters: &kube::Api<etcd_operator::crd::EtcdCluster>,
    name: &str,
    members: usize,
    timeout: Duration,
) -> etcd_operator::crd::EtcdClusterStatus {
    use quorum_core::conditions::{ConditionType, is_true};
    quorum_e2e::wait::until(
        &format!("{name} Ready with {members} members"),
        timeout,
        || async {
            let status = clusters
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if is_true(&status.conditions, ConditionType::Ready) && status.replicas == members as i32 {
                Ok(status)
            } else {
                Err(format!("replicas {} {:?}", status.replicas, status.conditions))
            }
        },
    )
    .await
}

/// A CA, and one certificate signed by it for `names` (DNS names or IP addresses), as the etcd
/// operator's TLS clients take it.
pub fn issue_certificate(names: Vec<String>, common_name: &str) -> etcd_operator::admin::TlsMaterial {
    let issued = quorum_e2e::tls::issue_certificate(names, common_name);
    etcd_operator::admin::TlsMaterial {
        ca_pem: issued.ca_pem,
        cert_pem: issued.cert_pem,
        key_pem: issued.key_pem,
    }
}

/// The spec of a cluster of `replicas` members at `version` (the pinned etcd when `None`),
/// with small volumes: what most tests create.
pub fn cluster_spec(replicas: i32, version: Option<&str>) -> etcd_operator::crd::EtcdClusterSpec {
    let pinned = quorum_e2e::tools::pinned_version("ETCD_VERSION");
    etcd_operator::crd::EtcdClusterSpec {
        replicas,
        version: version.unwrap_or(pinned.trim_start_matches('v')).to_string(),
        image: None,
        storage: etcd_operator::crd::EtcdStorage {
            size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        tls: None,
        backup: None,
        restore_from: None,
    }
}

use std::{collections::BTreeMap, net::SocketAddr, time::Duration};

use etcd_operator::{
    decide::{Decision, Facts, InFlight, Step, decide},
    execute::{StepOutcome, execute},
    observe::{ClusterView, EtcdClients},
    resolver::{FixedAddresses, MemberResolver, member_name},
};
use quorum_core::availability::{
    breaker::BreakerSettings, member_clients::AdminCalls, metrics::AdminMetrics, retry::CallPolicy,
};
use quorum_e2e::{etcd::EtcdProcesses, fault_proxy::FaultProxy};

pub const CLUSTER: &str = "demo";
pub const KEY: &str = "test/demo";

/// Real processes behind fault proxies, and the operator's clients pointed at the proxies.
pub struct Harness {
    pub processes: EtcdProcesses,
    pub proxies: BTreeMap<usize, FaultProxy>,
    pub clients: EtcdClients,
    pub in_flight: Option<InFlight>,
    pub replicas: usize,
    pub version: String,
    pub unhealthy_for: BTreeMap<usize, Duration>,
}

pub fn quick_policy() -> CallPolicy {
    CallPolicy {
        timeout: Duration::from_millis(800),
        read_attempts: 2,
        backoff_first: Duration::from_millis(50),
        backoff_max: Duration::from_millis(100),
    }
}

impl Harness {
    /// Starts `count` members named as the StatefulSet would name them.
    pub async fn start(count: usize) -> Self {
        let processes = EtcdProcesses::start_named(CLUSTER, count).await;
        let mut harness = Self {
            processes,
            proxies: BTreeMap::new(),
            clients: EtcdClients::new(
                AdminCalls {
                    policy: quick_policy(),
                    breaker: BreakerSettings {
                        failure_threshold: 3,
                        cooldown: Duration::from_millis(500),
                    },
                },
                AdminMetrics::default(),
                etcd_operator::leader_events::ListenSettings::default().keepalive,
            ),
            in_flight: None,
            replicas: count,
            version: String::new(),
            unhealthy_for: BTreeMap::new(),
        };
        for ordinal in 0..8 {
            harness.add_proxy(ordinal).await;
        }
        harness.version = harness.observe().await.members[0]
            .version
            .clone()
            .expect("version");
        harness
    }

    async fn add_proxy(&mut self, ordinal: usize) {
        let upstream = SocketAddr::new(self.processes.ip(ordinal).into(), 2379);
        let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), upstream)
            .await
            .unwrap();
        self.proxies.insert(ordinal, proxy);
    }

    /// The operator's view: client URLs through the proxies, peer URLs direct.
    pub fn resolver(&self) -> MemberResolver {
        MemberResolver::Fixed(
            self.proxies
                .iter()
                .map(|(ordinal, proxy)| {
                    (
                        *ordinal,
                        FixedAddresses {
                            client_url: format!("http://{}", proxy.address()),
                            peer_url: self.processes.peer_url(*ordinal),
                        },
                    )
                })
                .collect(),
        )
    }

    pub async fn observe(&self) -> ClusterView {
        self.clients
            .observe(KEY, &self.resolver(), self.replicas.max(1) + 1)
            .await
    }

    pub fn facts(&self, view: &ClusterView, desired: usize) -> Facts {
        let mut members = view.members.clone();
        for member in &mut members {
            member.unhealthy_for = self.unhealthy_for.get(&member.ordinal).copied();
        }
        Facts {
            cluster: CLUSTER.into(),
            desired_members: desired,
            desired_version: self.version.clone(),
            bootstrapped: true,
            statefulset_replicas: Some(self.replicas),
            members: view.membership.as_ref().map(|_| members),
            wipe_pending: Vec::new(),
            rejoin_pending: Vec::new(),
            pod_versions: Default::default(),
            templates: Default::default(),
            in_flight: self.in_flight.clone(),
            repair: None,
            recovery: None,
            forced_pods: Default::default(),
            ready_pods: Default::default(),
            pod_uids: Default::default(),
            newest_backup: None,
            freshness: Duration::from_secs(30),
            replace_after: Duration::from_secs(60),
            now: std::time::Instant::now(),
        }
    }

    /// Runs the loop until the decision is `Settled`, taking at most `max_passes` passes.
    /// Returns the steps taken, in order.
    pub async fn converge(&mut self, desired: usize, max_passes: usize) -> Vec<Step> {
        let mut taken = Vec::new();
        for _ in 0..max_passes {
            let view = self.observe().await;
            match decide(&self.facts(&view, desired)) {
                Decision::Settled => return taken,
                Decision::Wait(_) => tokio::time::sleep(Duration::from_millis(300)).await,
                Decision::Act(step) => {
                    self.take(&view, &step).await;
                    taken.push(step);
                }
            }
        }
        panic!("did not settle at {desired} members in {max_passes} passes; took {taken:?}");
    }

    /// Takes a step as the reconciler would: record it, then act.
    pub async fn take(&mut self, view: &ClusterView, step: &Step) {
        match *step {
            Step::StartPod { ordinal } => {
                let membership = view.membership.as_deref().unwrap_or_default();
                let initial: Vec<String> = membership
                    .iter()
                    .map(|m| {
                        let ordinal = self.resolver().ordinal_of_peer_url(&m.peer_urls[0]).unwrap();
                        format!("{}={}", member_name(CLUSTER, ordinal), m.peer_urls[0])
                    })
                    .collect();
                self.processes
                    .join(&member_name(CLUSTER, ordinal), ordinal, &initial.join(","))
                    .await;
                self.replicas = ordinal + 1;
            }
            Step::StopPod { ordinal } => {
                self.processes.member(&member_name(CLUSTER, ordinal)).kill().await;
                self.replicas = ordinal;
            }
            Step::ClearInFlight => self.in_flight = None,
            ref admin_step => {
                if let Some(in_flight) = admin_step.in_flight() {
                    self.in_flight = Some(in_flight);
                }
                let outcome = execute(
                    &self.clients,
                    KEY,
                    &self.resolver(),
                    view,
                    admin_step,
                    Duration::ZERO,
                )
                .await
                .unwrap_or_else(|error| panic!("{admin_step:?} failed: {error}"));
                if outcome != StepOutcome::Done {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }
}
