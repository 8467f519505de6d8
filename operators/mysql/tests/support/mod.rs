//! Shared pieces of the MySQL operator's integration tests: the operator run in the test
//! process, cluster specs, and SQL as an application would send it.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::{
    api::core::v1::{Event, Secret},
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, CustomResourceExt,
    api::{ListParams, PostParams},
};
use mysql_async::prelude::Queryable;
use mysql_operator::{
    MySqlOperator,
    crd::{Flavor, MySQLBackup, MySQLCluster, MySQLClusterSpec, MySQLClusterStatus, UserSpec},
    reconcile::{MemberAddresses, MemberConfig, Settings, State},
};
use quorum_core::{crd::Storage, naming::loopback_ip};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    local_members::{LocalMembers, MariaDbLauncher},
    operator, wait,
};

/// The application account every test cluster has, and its password.
pub const APP_USER: &str = "app";
pub const APP_PASSWORD: &str = "app-secret-Pa55";
pub const APP_DATABASE: &str = "shop";

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
        freshness: Duration::from_secs(30),
        operator_image: "quorum/mysql-operator:test".into(),
    };
    operator::start::<MySqlOperator>(
        client,
        namespace,
        leader_elect,
        settings,
        Duration::from_millis(1500),
    )
}

/// A namespace of the local control plane with the operator watching it and real MariaDB
/// servers behind its member pods (`LocalMembers` runs one for every pod a StatefulSet asks
/// for, on the loopback address the operator resolves for it).
pub struct Setup {
    pub client: kube::Client,
    pub namespace: TestNamespace,
    pub members: LocalMembers,
    pub operator: Running,
    pub clusters: Api<MySQLCluster>,
}

/// A fresh namespace named after `prefix`, set up as [`Setup`] says, with the application
/// account's Secret.
pub async fn setup(prefix: &str) -> Setup {
    setup_with(prefix, admin_client().await).await
}

/// As [`setup`], the operator sending its requests through `operator_client` (a recording
/// one, to count them).
pub async fn setup_with(prefix: &str, operator_client: kube::Client) -> Setup {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &MySQLCluster::crd()).await;
    install_crd(&client, &MySQLBackup::crd()).await;
    let namespace = TestNamespace::create(&client, prefix).await;
    let ns = namespace.name().to_string();
    let state = std::env::temp_dir().join(format!("quorum-local-members-{ns}"));
    let members = LocalMembers::start(client.clone(), MariaDbLauncher, state, Some(ns.clone()));
    let operator = start_operator(operator_client, &ns);
    create_app_secret(&client, &ns).await;
    let clusters = Api::namespaced(client.clone(), &ns);
    Setup {
        client,
        namespace,
        members,
        operator,
        clusters,
    }
}

impl Setup {
    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// The address of member `ordinal` of the cluster `main`.
    pub fn ip(&self, ordinal: usize) -> std::net::Ipv4Addr {
        self.ip_of("main", ordinal)
    }

    pub fn ip_of(&self, cluster: &str, ordinal: usize) -> std::net::Ipv4Addr {
        loopback_ip(self.ns(), cluster, ordinal)
    }

    /// Takes an on-demand `MySQLBackup` `name` of cluster `main` into `directory` and waits
    /// until it has succeeded.
    pub async fn backup_now(
        &self,
        name: &str,
        directory: &std::path::Path,
    ) -> mysql_operator::crd::MySQLBackupStatus {
        let backups: Api<MySQLBackup> = Api::namespaced(self.client.clone(), self.ns());
        let backup: MySQLBackup = serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.quorum.dev/v1alpha1",
            "kind": "MySQLBackup",
            "metadata": {"name": name},
            "spec": {"clusterName": "main", "destination": {"filesystem": {"path": directory}}}
        }))
        .unwrap();
        backups
            .create(&PostParams::default(), &backup)
            .await
            .expect("create MySQLBackup");
        wait::until("the backup stored", Duration::from_secs(60), || async {
            let status = backups
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match status.run.phase {
                Some(mysql_operator::crd::BackupPhase::Succeeded) => Ok(status),
                other => Err(format!("{other:?} {:?}", status.run.message)),
            }
        })
        .await
    }

    /// Creates the cluster `main` of `replicas` members.
    pub async fn create(&self, replicas: i32) {
        self.clusters
            .create(
                &PostParams::default(),
                &MySQLCluster::new("main", cluster_spec(replicas)),
            )
            .await
            .expect("create MySQLCluster");
    }

    /// The messages of the namespace's events with `reason`.
    pub async fn events(&self, reason: &str) -> Vec<String> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), self.ns());
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message)
            .collect()
    }

    /// How many times events with `reason` were published (a repeated event is one object whose
    /// series counts the repeats).
    pub async fn event_occurrences(&self, reason: &str) -> i32 {
        let events: Api<Event> = Api::namespaced(self.client.clone(), self.ns());
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| {
                let series = e.series.and_then(|s| s.count).unwrap_or(0);
                series.max(e.count.unwrap_or(0)).max(1)
            })
            .sum()
    }

    /// Polls the cluster `main`'s status until `check` accepts it, and returns what `check`
    /// returned; `check`'s error says what it saw instead.
    pub async fn status_until<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(MySQLClusterStatus) -> Result<T, String>,
    ) -> T {
        wait::until(what, timeout, || async {
            let cluster = self.clusters.get("main").await.map_err(|e| e.to_string())?;
            check(cluster.status.unwrap_or_default())
        })
        .await
    }

    /// The root password the operator generated for the cluster `main`.
    pub async fn root_password(&self) -> String {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), self.ns());
        let secret = secrets
            .get("main-root")
            .await
            .expect("the generated root password");
        String::from_utf8(secret.data.expect("data")["password"].0.clone()).expect("UTF-8")
    }

    /// Stops the operator as SIGTERM would and starts a new one, with nothing of the old
    /// one's memory (cached clients, applied accounts).
    pub async fn restart_operator(self) -> Self {
        self.stop_operator().await.start_operator()
    }

    /// Stops the operator as SIGTERM would, so a scenario can be set up that it must not repair
    /// meanwhile; [`Stopped::start_operator`] starts a new one.
    pub async fn stop_operator(self) -> Stopped {
        let Setup {
            client,
            namespace,
            members,
            operator,
            clusters,
        } = self;
        operator.stop().await;
        Stopped {
            client,
            namespace,
            members,
            clusters,
        }
    }

    pub async fn finish(self) {
        self.operator.stop().await;
        drop(self.members);
        self.namespace.delete().await;
    }
}

/// A [`Setup`] whose operator is stopped.
pub struct Stopped {
    pub client: kube::Client,
    pub namespace: TestNamespace,
    pub members: LocalMembers,
    pub clusters: Api<MySQLCluster>,
}

impl Stopped {
    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// Starts a new operator, with nothing of the old one's memory.
    pub fn start_operator(self) -> Setup {
        let Stopped {
            client,
            namespace,
            members,
            clusters,
        } = self;
        let operator = start_operator(client.clone(), namespace.name());
        Setup {
            client,
            namespace,
            members,
            operator,
            clusters,
        }
    }
}

/// Creates `items` if needed and inserts `ids` through the application account.
pub async fn insert_items(ip: std::net::Ipv4Addr, ids: std::ops::Range<u64>) {
    let mut conn = app_connection(ip).await.expect("app connection to the primary");
    conn.query_drop("CREATE TABLE IF NOT EXISTS items (id BIGINT PRIMARY KEY, note VARCHAR(64))")
        .await
        .expect("create table");
    for id in ids {
        conn.exec_drop("INSERT INTO items VALUES (?, ?)", (id, format!("item {id}")))
            .await
            .expect("insert");
    }
}

/// A MariaDB cluster of `replicas` members with the application account, small buffers.
pub fn cluster_spec(replicas: i32) -> MySQLClusterSpec {
    MySQLClusterSpec {
        replicas,
        flavor: Flavor::MariaDB,
        version: "10.11.19".into(),
        image: None,
        storage: Storage {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        config: BTreeMap::from([
            ("innodb_buffer_pool_size".to_string(), "16M".to_string()),
            ("innodb_log_file_size".to_string(), "8M".to_string()),
        ]),
        root_password_secret: None,
        users: vec![UserSpec {
            name: APP_USER.into(),
            password_secret: "app-password".into(),
            database: APP_DATABASE.into(),
            access: Default::default(),
        }],
        replication: None,
        tls: None,
        backup: None,
        restore_from: None,
    }
}

/// Creates the application account's Secret.
pub async fn create_app_secret(client: &kube::Client, namespace: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut secret = Secret::default();
    secret.metadata.name = Some("app-password".into());
    secret.string_data = Some(BTreeMap::from([(
        "password".to_string(),
        APP_PASSWORD.to_string(),
    )]));
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("app Secret");
}

/// Waits until the cluster is Ready with `replicas` caught-up replicas and nothing to do.
pub async fn ready(clusters: &Api<MySQLCluster>, name: &str, replicas: i32) -> MySQLClusterStatus {
    wait::until(
        &format!("{name} Ready with {replicas} caught-up replicas"),
        Duration::from_secs(180),
        || async {
            let cluster = clusters.get(name).await.map_err(|e| e.to_string())?;
            let status = cluster.status.clone().unwrap_or_default();
            let is = |type_: &str, value: &str| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == value)
            };
            if is("Ready", "True") && is("Progressing", "False") && status.ready_replicas == replicas {
                Ok(status)
            } else {
                Err(format!("{:?} {:?}", status.members, status.conditions))
            }
        },
    )
    .await
}

/// A connection as the application account to `ip`.
pub async fn app_connection(ip: std::net::Ipv4Addr) -> Result<mysql_async::Conn, mysql_async::Error> {
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip.to_string())
        .tcp_port(3306)
        .user(Some(APP_USER))
        .pass(Some(APP_PASSWORD))
        .db_name(Some(APP_DATABASE))
        .prefer_socket(false);
    tokio::time::timeout(Duration::from_secs(3), mysql_async::Conn::new(options))
        .await
        .unwrap_or_else(|_| Err(mysql_async::Error::Other("connect timed out".into())))
}

/// The ids in `shop.items` on `ip`, sorted.
pub async fn item_ids(ip: std::net::Ipv4Addr) -> Result<Vec<u64>, String> {
    let mut conn = app_connection(ip).await.map_err(|e| e.to_string())?;
    conn.query("SELECT id FROM items ORDER BY id")
        .await
        .map_err(|e| e.to_string())
}

/// Waits until `ip` holds exactly `expected` in `shop.items`.
pub async fn converges(ip: std::net::Ipv4Addr, expected: &[u64]) {
    wait::until(
        &format!("{ip} holds the {} rows written", expected.len()),
        Duration::from_secs(60),
        || async {
            let ids = item_ids(ip).await?;
            if ids == expected {
                Ok(())
            } else {
                Err(format!("{} rows, expected {}", ids.len(), expected.len()))
            }
        },
    )
    .await
}

/// An application writing rows `1000, 1001, …` to one server until a commit fails or times out,
/// remembering every commit the server acknowledged.
pub struct Writer {
    acknowledged: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    pub fn start(ip: std::net::Ipv4Addr, note: &'static str) -> Self {
        let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let task = {
            let acknowledged = acknowledged.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = app_connection(ip).await else {
                    return;
                };
                for id in 1_000u64.. {
                    let insert = conn.exec_drop("INSERT INTO items VALUES (?, ?)", (id, note));
                    match tokio::time::timeout(Duration::from_secs(5), insert).await {
                        Ok(Ok(())) => acknowledged.lock().unwrap().push(id),
                        _ => return,
                    }
                }
            })
        };
        Self { acknowledged, task }
    }

    /// Waits until at least `count` commits were acknowledged.
    pub async fn committed(&self, count: usize) {
        wait::until(
            &format!("the writer committed {count} rows"),
            Duration::from_secs(60),
            || async {
                let so_far = self.acknowledged.lock().unwrap().len();
                if so_far >= count {
                    Ok(())
                } else {
                    Err(format!("{so_far} so far"))
                }
            },
        )
        .await;
    }

    /// Waits up to `timeout` for the writer to stop by itself, stops it otherwise, and returns
    /// every commit that was acknowledged.
    pub async fn stop(mut self, timeout: Duration) -> std::collections::BTreeSet<u64> {
        if tokio::time::timeout(timeout, &mut self.task).await.is_err() {
            self.task.abort();
            let _ = (&mut self.task).await;
        }
        self.acknowledged.lock().unwrap().iter().copied().collect()
    }
}

/// The sample users are shown, `samples/mysql-cluster.yaml` (its MySQLCluster is also the
/// bundle's first `alm-examples` entry): creates its application account's Secret in
/// `namespace` and returns its MySQLCluster, not yet created.
pub async fn create_sample_secret(client: &kube::Client, namespace: &str) -> MySQLCluster {
    let sample =
        std::fs::read_to_string(quorum_e2e::tools::repository_root().join("samples/mysql-cluster.yaml"))
            .expect("samples/mysql-cluster.yaml");
    let mut cluster = None;
    for document in serde_yaml::Deserializer::from_str(&sample) {
        let value: serde_json::Value = serde::Deserialize::deserialize(document).expect("YAML");
        match value["kind"].as_str() {
            Some("Secret") => {
                let secret: Secret = serde_json::from_value(value).expect("a Secret");
                Api::<Secret>::namespaced(client.clone(), namespace)
                    .create(&PostParams::default(), &secret)
                    .await
                    .expect("creating the sample's Secret");
            }
            Some("MySQLCluster") => cluster = Some(serde_json::from_value(value).expect("a MySQLCluster")),
            other => panic!("unexpected {other:?} in the sample"),
        }
    }
    cluster.expect("a MySQLCluster in the sample")
}

/// The password in the sample's application account Secret.
pub const SAMPLE_APP_PASSWORD: &str = "change-me-Pa55";

/// Waits until the first of `cluster`'s users logs in to its database on the primary, with
/// the sample's password, as an application would.
pub async fn application_account_connects(
    namespace: &str,
    cluster: &MySQLCluster,
    status: &MySQLClusterStatus,
) {
    let name = cluster.metadata.name.clone().expect("a name");
    let primary = status.primary.as_deref().expect("a primary");
    let ordinal = mysql_operator::resources::ordinal_of(&name, primary).expect("a member of the cluster");
    let user = &cluster.spec.users[0];
    wait::until("the application account", Duration::from_secs(60), || async {
        let options = mysql_async::OptsBuilder::default()
            .ip_or_hostname(loopback_ip(namespace, &name, ordinal).to_string())
            .tcp_port(3306)
            .user(Some(user.name.clone()))
            .pass(Some(SAMPLE_APP_PASSWORD))
            .db_name(Some(user.database.clone()))
            .prefer_socket(false);
        mysql_async::Conn::new(options)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await;
}

/// A session on member `ip` as `user`.
pub async fn session(ip: std::net::Ipv4Addr, user: &str, password: &str) -> mysql_async::Conn {
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(ip.to_string())
        .tcp_port(3306)
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    mysql_async::Conn::new(options).await.expect("a session")
}

/// The member's binary logs, oldest first, after a rotation (when expiry is applied).
pub async fn binary_logs_after_rotation(root: &mut mysql_async::Conn) -> Vec<String> {
    root.query_drop("FLUSH BINARY LOGS")
        .await
        .expect("FLUSH BINARY LOGS");
    let rows: Vec<mysql_async::Row> = root.query("SHOW BINARY LOGS").await.expect("SHOW BINARY LOGS");
    rows.into_iter()
        .map(|row| row.get::<String, _>(0).expect("a log name"))
        .collect()
}
