//! Shared pieces of the MongoDB operator's integration tests: the operator run in the test
//! process, specs, the local control plane with a member process behind every pod (the
//! replica-set simulator, or a real `mongod` when `QUORUM_MONGOD` names one), and data access
//! as an application would have it.

use std::time::Duration;

use bson::{Document, doc};
use k8s_openapi::{api::core::v1::Event, apimachinery::pkg::api::resource::Quantity};
use kube::{Api, CustomResourceExt, api::ListParams};
use mongodb_operator::{
    MongoDbOperator,
    admin::{Credentials, MongoAdmin, ReplConfig},
    crd::{MongoDBBackup, MongoDBReplicaSet, MongoDBReplicaSetSpec, MongoDBReplicaSetStatus},
    reconcile::{MemberAddresses, MemberConfig, Settings, State},
    resources::{PASSWORD_KEY, USERNAME_KEY, generated_admin_secret_name},
};
use quorum_core::{crd::Storage, naming::loopback_ip};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, generated_secret, install_crd},
    local_members::{LocalMembers, MongoLauncher},
    operator, wait,
};
use secrecy::SecretString;

/// A running operator; [`Running::stop`] shuts it down as SIGTERM would.
pub type Running = operator::Running<State>;

/// Starts the operator on `namespace`, with members on loopback addresses.
pub fn start_operator(client: kube::Client, namespace: &str) -> Running {
    start_operator_with(client, namespace, false)
}

/// As [`start_operator`]; with `leader_elect`, it first takes its Lease in `namespace`, as a
/// deployed operator does.
pub fn start_operator_with(client: kube::Client, namespace: &str, leader_elect: bool) -> Running {
    let settings = Settings {
        members: MemberConfig {
            cluster_domain: "cluster.local".into(),
            member_addresses: MemberAddresses::Loopback,
            allow_http_backups: true,
            backup_runner: quorum_core::config::BackupRunner::Operator,
        },
        operator_image: "quorum/mongodb-operator:test".into(),
    };
    operator::start::<MongoDbOperator>(
        client,
        namespace,
        leader_elect,
        settings,
        Duration::from_millis(2000),
    )
}

/// The local control plane, a test namespace, a member process for each pod, and the operator.
pub struct Setup {
    pub client: kube::Client,
    pub namespace: TestNamespace,
    pub pods: LocalMembers,
    pub operator: Running,
    pub sets: Api<MongoDBReplicaSet>,
}

impl Setup {
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, admin_client().await).await
    }

    /// As [`Setup::start`], the operator sending its requests through `operator_client` (a
    /// recording one, to count them).
    pub async fn start_with(prefix: &str, operator_client: kube::Client) -> Self {
        quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
        quorum_core::install_crypto_provider();
        let client = admin_client().await;
        install_crd(&client, &MongoDBReplicaSet::crd()).await;
        install_crd(&client, &MongoDBBackup::crd()).await;
        let namespace = TestNamespace::create(&client, prefix).await;
        let ns = namespace.name().to_string();
        let state = std::env::temp_dir().join(format!("quorum-local-mongodb-{ns}"));
        let pods = LocalMembers::start(client.clone(), MongoLauncher, state, Some(ns.clone()));
        let operator = start_operator(operator_client, &ns);
        let sets = Api::namespaced(client.clone(), &ns);
        Self {
            client,
            namespace,
            pods,
            operator,
            sets,
        }
    }

    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// `host:port` of data member `ordinal` of set `name`.
    pub fn host(&self, name: &str, ordinal: usize) -> String {
        format!("{}:27017", loopback_ip(self.ns(), name, ordinal))
    }

    /// The administrator's login the operator generated for set `name`.
    pub async fn credentials(&self, name: &str) -> Credentials {
        generated_credentials(&self.client, self.ns(), name).await
    }

    /// A direct admin connection to data member `ordinal` of set `name`, as the operator has.
    pub async fn admin(&self, name: &str, ordinal: usize) -> MongoAdmin {
        let credentials = self.credentials(name).await;
        MongoAdmin::connect(
            &self.host(name, ordinal),
            Some(&credentials),
            Duration::from_secs(3),
        )
        .unwrap()
    }

    /// A connection to data member `ordinal` of set `name` alone, whatever its role.
    pub async fn member_client(&self, name: &str, ordinal: usize) -> mongodb::Client {
        let credentials = self.credentials(name).await;
        let uri = format!(
            "mongodb://{}:{}@{}/?directConnection=true&readPreference=secondaryPreferred&authSource=admin&serverSelectionTimeoutMS=5000",
            credentials.username,
            secrecy::ExposeSecret::expose_secret(&credentials.password),
            self.host(name, ordinal),
        );
        mongodb::Client::with_uri_str(&uri)
            .await
            .expect("a member's client")
    }

    /// The set's configuration as its primary reports it.
    pub async fn config(&self, name: &str, members: usize) -> ReplConfig {
        let credentials = self.credentials(name).await;
        wait::until("the primary's configuration", Duration::from_secs(30), || async {
            for ordinal in 0..members {
                let admin = MongoAdmin::connect(
                    &self.host(name, ordinal),
                    Some(&credentials),
                    Duration::from_secs(2),
                )
                .map_err(|e| e.to_string())?;
                if admin.hello().await.is_ok_and(|hello| hello.is_writable_primary) {
                    return admin
                        .config()
                        .await
                        .map_err(|e| e.to_string())?
                        .ok_or_else(|| "no configuration".to_string());
                }
            }
            Err("no primary".into())
        })
        .await
    }

    /// An application's client: the driver discovers the set from the seed list.
    pub async fn application(&self, name: &str, members: usize) -> mongodb::Client {
        application_client(&self.client, self.ns(), name, members).await
    }

    /// Creates set `name` and waits until it is Ready with `members` ready members.
    pub async fn create_ready(
        &self,
        name: &str,
        spec: MongoDBReplicaSetSpec,
        members: i32,
    ) -> MongoDBReplicaSetStatus {
        self.sets
            .create(
                &kube::api::PostParams::default(),
                &MongoDBReplicaSet::new(name, spec),
            )
            .await
            .unwrap_or_else(|e| panic!("creating MongoDBReplicaSet {name}: {e}"));
        self.ready(name, members).await
    }

    /// Waits until set `name` is Ready with `members` ready members and nothing left to do.
    pub async fn ready(&self, name: &str, members: i32) -> MongoDBReplicaSetStatus {
        ready(&self.sets, name, members).await
    }

    /// Polls set `name`'s status until `check` accepts it.
    pub async fn status_until<T>(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(MongoDBReplicaSetStatus) -> Result<T, String>,
    ) -> T {
        wait::until(what, timeout, || async {
            let set = self.sets.get(name).await.map_err(|e| e.to_string())?;
            check(set.status.unwrap_or_default())
        })
        .await
    }

    /// The set's events, as `kubectl describe` shows them.
    pub async fn events(&self, name: &str) -> Vec<Event> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), self.ns());
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .unwrap()
            .items
    }

    /// The reasons of the set's events.
    pub async fn event_reasons(&self, name: &str) -> Vec<String> {
        self.events(name)
            .await
            .into_iter()
            .filter_map(|event| event.reason)
            .collect()
    }

    pub async fn scale(&self, name: &str, members: i32) {
        let patch = serde_json::json!({"spec": {"members": members}});
        self.sets
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }

    pub async fn stop(self) {
        self.operator.stop().await;
        drop(self.pods);
        self.namespace.delete().await;
    }
}

/// A set of `members` voting members on MongoDB 7.0.
pub fn spec(members: i32) -> MongoDBReplicaSetSpec {
    MongoDBReplicaSetSpec {
        members,
        non_voting_members: 0,
        hidden_members: 0,
        arbiter: false,
        version: "7.0".into(),
        image: None,
        storage: Storage {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        admin_secret: None,
        keyfile_secret: None,
        backup: None,
        restore_from: None,
    }
}

/// Inserts `count` documents into `shop.orders` with majority write concern; returns their ids.
pub async fn insert_orders(client: &mongodb::Client, first: i64, count: i64) -> Vec<i64> {
    try_insert_orders(client, first, count)
        .await
        .expect("inserting orders")
}

/// [`insert_orders`], with the driver's error when the batch was not acknowledged (a primary
/// that stepped down mid-batch, say): none, some or all of its documents may be stored.
pub async fn try_insert_orders(
    client: &mongodb::Client,
    first: i64,
    count: i64,
) -> Result<Vec<i64>, mongodb::error::Error> {
    let orders = client.database("shop").collection::<Document>("orders");
    let ids: Vec<i64> = (first..first + count).collect();
    let documents: Vec<Document> = ids
        .iter()
        .map(|id| doc! { "_id": id, "item": format!("item-{id}") })
        .collect();
    orders
        .insert_many(documents)
        .write_concern(mongodb::options::WriteConcern::majority())
        .await?;
    Ok(ids)
}

/// Checks the order ids a set holds against its client's history: every acknowledged id is held,
/// and every id held was written (acknowledged, or in a batch whose outcome is unknown).
pub fn check_orders(held: &[i64], acknowledged: &[i64], unknown: &[i64]) -> Result<(), String> {
    let held: std::collections::BTreeSet<i64> = held.iter().copied().collect();
    let lost: Vec<i64> = acknowledged
        .iter()
        .filter(|id| !held.contains(id))
        .copied()
        .collect();
    let written: std::collections::BTreeSet<i64> = acknowledged.iter().chain(unknown).copied().collect();
    let invented: Vec<i64> = held.iter().filter(|id| !written.contains(id)).copied().collect();
    match (lost.is_empty(), invented.is_empty()) {
        (true, true) => Ok(()),
        _ => Err(format!(
            "{} acknowledged orders lost (first: {:?}); {} orders held that were never written (first: {:?})",
            lost.len(),
            lost.first(),
            invented.len(),
            invented.first()
        )),
    }
}

/// Every order id in the set, read from the primary.
pub async fn order_ids(client: &mongodb::Client) -> Vec<i64> {
    use futures::TryStreamExt;
    let orders = client.database("shop").collection::<Document>("orders");
    let mut ids: Vec<i64> = orders
        .find(doc! {})
        .await
        .expect("reading orders")
        .try_collect::<Vec<Document>>()
        .await
        .expect("reading orders")
        .iter()
        .map(|document| document.get_i64("_id").expect("an order id"))
        .collect();
    ids.sort_unstable();
    ids
}

/// The administrator's login the operator generated for set `name` in `namespace`.
pub async fn generated_credentials(client: &kube::Client, namespace: &str, name: &str) -> Credentials {
    let data = generated_secret(client, namespace, &generated_admin_secret_name(name)).await;
    Credentials {
        username: data[USERNAME_KEY].clone(),
        password: SecretString::from(data[PASSWORD_KEY].clone()),
    }
}

/// An application's client of set `name` in `namespace`, logged in with the generated
/// administrator's login: the driver discovers the set from the seed list of `members` hosts.
pub async fn application_client(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    members: usize,
) -> mongodb::Client {
    let credentials = generated_credentials(client, namespace, name).await;
    let seeds: Vec<String> = (0..members)
        .map(|ordinal| format!("{}:27017", loopback_ip(namespace, name, ordinal)))
        .collect();
    let uri = format!(
        "mongodb://{}:{}@{}/?replicaSet={name}&authSource=admin&serverSelectionTimeoutMS=20000",
        credentials.username,
        secrecy::ExposeSecret::expose_secret(&credentials.password),
        seeds.join(","),
    );
    mongodb::Client::with_uri_str(&uri)
        .await
        .expect("application client")
}

/// Waits until set `name` is Ready with `members` ready members and nothing left to do.
pub async fn ready(sets: &Api<MongoDBReplicaSet>, name: &str, members: i32) -> MongoDBReplicaSetStatus {
    wait::until(
        &format!("{name} Ready with {members} ready members"),
        Duration::from_secs(180),
        || async {
            let status = sets
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let is = |type_: &str, value: &str| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == value)
            };
            if is("Ready", "True") && is("Progressing", "False") && status.ready_members == members {
                Ok(status)
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await
}

/// An application's majority-acknowledged writes to set `name` are read back through the
/// driver's discovery of the set.
pub async fn writes_are_kept(client: &kube::Client, namespace: &str, name: &str, members: usize) {
    let application = application_client(client, namespace, name, members).await;
    let written = insert_orders(&application, 1, 20).await;
    assert_eq!(order_ids(&application).await, written);
}
