//! `kubectl quorum` run as users run it (the built binary, the kubeconfig of the local control
//! plane) against an etcd cluster that the etcd operator forms from real etcd processes behind
//! its member pods: status as text and JSON, pause and resume honoured by the operator, a backup
//! taken now, a restore into a new cluster, and refusals that say what to do; `credentials` of a
//! cluster object; `connect` and `credentials` against a MariaDB cluster of real pods.

use std::{collections::BTreeMap, process::Output, time::Duration};

use etcd_operator::{
    EtcdOperator,
    crd::{BackupPhase, BackupPolicy, EtcdBackup, EtcdCluster, EtcdClusterSpec, EtcdStorage},
    reconcile::{MemberAddresses, MemberConfig, Settings},
};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::{
    conditions::{ConditionType, is_true},
    crd::{BackupDestination, FilesystemDestination},
};
use quorum_e2e::{
    control_plane::{self, TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    operator,
    tools::{etcd_binary, pinned_version},
    wait,
};

/// Runs the plugin in `namespace` with `args`, as `kubectl quorum` would, with the local control
/// plane's kubeconfig and its kubectl (which `connect` runs).
async fn plugin(namespace: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-quorum"))
        .env("KUBECONFIG", control_plane::kubeconfig_path())
        .env("KUBECTL", quorum_e2e::tools::kubectl_binary())
        .arg("--namespace")
        .arg(namespace)
        .args(args)
        .output()
        .await
        .expect("run kubectl-quorum")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "kubectl-quorum failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

fn refused(output: &Output) -> String {
    assert!(!output.status.success(), "expected a refusal");
    String::from_utf8(output.stderr.clone()).expect("utf-8")
}

fn spec(backups: &std::path::Path) -> EtcdClusterSpec {
    EtcdClusterSpec {
        replicas: 3,
        version: pinned_version("ETCD_VERSION").trim_start_matches('v').to_string(),
        image: None,
        storage: EtcdStorage {
            size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        tls: None,
        backup: Some(BackupPolicy {
            schedule: "0 3 * * *".into(),
            destination: BackupDestination {
                s3: None,
                filesystem: Some(FilesystemDestination {
                    path: backups.display().to_string(),
                }),
            },
            retain: 3,
            max_age_minutes: None,
            verify: false,
        }),
        restore_from: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pause_resume_backup_and_restore_through_the_plugin_and_refusals_that_say_what_to_do() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "kubectl-quorum").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-plugin-{ns}"));
    let _members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(spec(&scratch).version, etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let settings = Settings {
        members: MemberConfig {
            cluster_domain: "cluster.local".into(),
            member_addresses: MemberAddresses::Loopback,
            allow_http_backups: true,
            backup_runner: quorum_core::config::BackupRunner::Operator,
        },
        freshness: Duration::from_secs(30),
        replace_after: Duration::from_secs(300),
        operator_image: "quorum/etcd-operator:test".into(),
        leader_events: Default::default(),
    };
    let running =
        operator::start::<EtcdOperator>(client.clone(), &ns, false, settings, Duration::from_millis(800));

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("main", spec(&scratch.join("backups"))),
        )
        .await
        .unwrap();
    // A member can be Ready while the pod that replaced its first one waits for the scheduler;
    // the placement shown below is asserted once every pod has its node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let status = wait::until(
        "main Ready with 3 members, each pod on a node",
        Duration::from_secs(120),
        || async {
            let status = clusters
                .get("main")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if !is_true(&status.conditions, ConditionType::Ready) || status.members.len() != 3 {
                return Err(format!("{:?}", status.conditions));
            }
            let listed = pods
                .list(&ListParams::default().labels("app.kubernetes.io/instance=main"))
                .await
                .map_err(|e| e.to_string())?;
            let unplaced: Vec<String> = listed
                .items
                .iter()
                .filter(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                .map(|pod| pod.name_any())
                .collect();
            if listed.items.len() == 3 && unplaced.is_empty() {
                Ok(status)
            } else {
                Err(format!(
                    "{} pods, not yet on a node: {unplaced:?}",
                    listed.items.len()
                ))
            }
        },
    )
    .await;
    let leader = status.leader.clone().expect("a leader");

    // Status as text: plain when piped, a tree of members with role and health.
    let text = stdout(&plugin(&ns, &["status", "etcdcluster/main"]).await);
    assert!(
        text.starts_with(&format!("EtcdCluster/main in {ns}: Ready True\n")),
        "{text}"
    );
    assert!(text.contains(&format!("  primary: {leader}\n")), "{text}");
    assert!(text.contains(&format!(" {leader} leader Healthy")), "{text}");
    assert_eq!(text.matches(" follower Healthy").count(), 2, "{text}");
    assert!(!text.contains('\x1b'), "no colour into a pipe: {text}");

    // Status as JSON, by another name of the kind.
    let json: serde_json::Value = serde_json::from_str(&stdout(
        &plugin(&ns, &["status", "etcd/main", "-o", "json"]).await,
    ))
    .unwrap();
    assert_eq!(json["kind"], "EtcdCluster");
    assert_eq!(json["paused"], false);
    let members = json["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(members.iter().filter(|m| m["role"] == "leader").count(), 1);
    assert!(
        members.iter().all(|m| m["placement"]["node"].is_string()),
        "each member's pod and node: {members:?}"
    );

    // Paused, a spec change is not acted on; resumed, it is.
    let paused = stdout(&plugin(&ns, &["pause", "etcdcluster/main"]).await);
    assert!(
        paused.contains("kubectl quorum resume EtcdCluster/main"),
        "{paused}"
    );
    let paused_view: serde_json::Value = serde_json::from_str(&stdout(
        &plugin(&ns, &["status", "etcdcluster/main", "-o", "json"]).await,
    ))
    .unwrap();
    assert_eq!(paused_view["paused"], true);
    let changed = clusters
        .patch(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"backup": {"maxAgeMinutes": 600}}})),
        )
        .await
        .unwrap();
    let generation = changed.metadata.generation.unwrap();
    // Held for a while: the paused operator records nothing of the new generation.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = clusters.get("main").await.unwrap().status.unwrap();
    assert!(held.observed_generation < Some(generation), "paused: {held:?}");
    assert!(
        !held.conditions.iter().any(|c| c.type_ == "BackupStale"),
        "no new condition while paused"
    );
    stdout(&plugin(&ns, &["resume", "etcdcluster/main"]).await);
    wait::until(
        "the change acted on once resumed",
        Duration::from_secs(60),
        || async {
            let status = clusters
                .get("main")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let stale_condition = status.conditions.iter().any(|c| c.type_ == "BackupStale");
            if status.observed_generation == Some(generation) && stale_condition {
                Ok(())
            } else {
                Err(format!("{:?}", status.observed_generation))
            }
        },
    )
    .await;

    // A backup now, to the cluster's own destination.
    let created = stdout(&plugin(&ns, &["backup", "etcdcluster/main", "--name", "now"]).await);
    assert!(created.contains("EtcdBackup now created"), "{created}");
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), &ns);
    wait::until("the backup taken now", Duration::from_secs(60), || async {
        let status = backups
            .get("now")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        match status.run.phase {
            Some(BackupPhase::Succeeded) => Ok(()),
            Some(BackupPhase::Failed) => panic!("backup failed: {:?}", status.run.message),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let with_backup = stdout(&plugin(&ns, &["status", "etcdcluster/main"]).await);
    assert!(with_backup.contains("last backup: now at "), "{with_backup}");

    // A restore is a new cluster with the source's spec, restoreFrom set, no backup policy;
    // never into a cluster that exists.
    let restoring = stdout(&plugin(&ns, &["restore", "etcdcluster/copy", "--from", "now"]).await);
    assert!(
        restoring.contains("EtcdCluster/copy created from EtcdBackup now"),
        "{restoring}"
    );
    let copy = clusters.get("copy").await.unwrap();
    assert_eq!(copy.spec.restore_from.as_ref().unwrap().backup_name, "now");
    assert!(copy.spec.backup.is_none());
    assert_eq!(copy.spec.replicas, 3);
    assert_eq!(
        copy.spec.version,
        status.version.clone().unwrap_or(copy.spec.version.clone())
    );
    clusters
        .delete("copy", &Default::default())
        .await
        .expect("delete the copy");
    let into_existing = refused(&plugin(&ns, &["restore", "etcdcluster/main", "--from", "now"]).await);
    assert!(
        into_existing.contains("creating EtcdCluster/main (a restore goes into a new cluster)"),
        "{into_existing}"
    );

    // A repair request reaches the operator, which refuses a member the cluster does not have
    // and says so in status (and `status` shows it); `--end` withdraws it.
    let requested = stdout(&plugin(&ns, &["repair", "etcdcluster/main", "main-9"]).await);
    assert!(requested.contains("repair of main-9 requested"), "{requested}");
    wait::until(
        "the repair refused in status",
        Duration::from_secs(60),
        || async {
            let status = clusters
                .get("main")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match status.repair {
                Some(record) if record.message.contains("not a voting member") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let shown = stdout(&plugin(&ns, &["status", "etcdcluster/main"]).await);
    assert!(
        shown.contains("repair: main-9 Waiting: quorum.dev/repair names \"main-9\""),
        "{shown}"
    );
    let ended = stdout(&plugin(&ns, &["repair", "etcdcluster/main", "--end"]).await);
    assert!(ended.contains("repair request ended"), "{ended}");
    wait::until("the repair record gone", Duration::from_secs(60), || async {
        let status = clusters
            .get("main")
            .await
            .map_err(|e| e.to_string())?
            .status
            .unwrap_or_default();
        status.repair.map_or(Ok(()), |record| Err(format!("{record:?}")))
    })
    .await;

    // Refusals say what to do.
    let no_switchover = refused(&plugin(&ns, &["switchover", "etcdcluster/main", "--to", "main-1"]).await);
    assert!(
        no_switchover.contains("EtcdCluster/main has no switchover: etcd elects its leader itself"),
        "{no_switchover}"
    );
    let unknown_kind = refused(&plugin(&ns, &["status", "postgres/main"]).await);
    assert!(
        unknown_kind.contains("use etcdcluster, mysqlcluster"),
        "{unknown_kind}"
    );
    let missing = refused(&plugin(&ns, &["status", "etcdcluster/absent"]).await);
    assert!(
        missing.contains(&format!("EtcdCluster/absent in {ns}")),
        "{missing}"
    );

    running.stop().await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}

/// `credentials` reads only the cluster object and, when asked, its Secrets: a cluster that no
/// operator runs shows the same. The passwords appear only with `--show-password`.
#[tokio::test]
async fn credentials_name_services_and_secrets_and_show_passwords_only_when_asked() {
    let client = admin_client().await;
    install_crd(&client, &mysql_operator::crd::MySQLCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "plugin-credentials").await;
    let ns = namespace.name().to_string();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    for (name, password) in [("given-root", "root-s3cret"), ("app-password", "app-s3cret")] {
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "stringData": {"password": password}
        }))
        .unwrap();
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    let cluster: mysql_operator::crd::MySQLCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.quorum.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": "shop"},
        "spec": {
            "replicas": 3, "flavor": "MariaDB",
            "version": mysql_operator::packaging::DEFAULT_MARIADB_IMAGE_TAG, "storage": {"size": "1Gi"},
            "rootPasswordSecret": "given-root",
            "users": [{"name": "app", "passwordSecret": "app-password", "database": "shop"}]
        }
    }))
    .unwrap();
    Api::<mysql_operator::crd::MySQLCluster>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();

    let text = stdout(&plugin(&ns, &["credentials", "mysql/shop"]).await);
    assert!(text.contains(&format!("shop-primary.{ns}.svc:3306")), "{text}");
    assert!(text.contains(&format!("shop-replicas.{ns}.svc:3306")), "{text}");
    assert!(
        text.contains(&format!(
            "kubectl get secret -n {ns} given-root -o jsonpath='{{.data.password}}' | base64 -d"
        )),
        "{text}"
    );
    assert!(text.contains("user app on shop"), "{text}");
    assert!(!text.contains("s3cret"), "a password shown unasked: {text}");

    let shown: serde_json::Value = serde_json::from_str(&stdout(
        &plugin(
            &ns,
            &["credentials", "mysql/shop", "--show-password", "-o", "json"],
        )
        .await,
    ))
    .unwrap();
    assert_eq!(
        shown["passwords"],
        serde_json::json!(["root-s3cret", "app-s3cret"]),
        "{shown}"
    );
    assert_eq!(shown["accounts"][1]["secret"], "app-password", "{shown}");

    let missing = refused(&plugin(&ns, &["credentials", "mysql/absent"]).await);
    assert!(
        missing.contains(&format!("MySQLCluster/absent in {ns}")),
        "{missing}"
    );
    namespace.delete().await;
}

/// `connect` and `credentials` against members that run as users run them: a MariaDB cluster of
/// real pods on the real node, its operator installed by its chart. The session opens the
/// server's own client in the primary's container and logs in with the password the member
/// reads, which the user never types.
#[tokio::test]
async fn connect_opens_the_servers_own_client_on_the_primary_without_the_user_typing_a_password() {
    let setup =
        quorum_e2e::real_pods::OnRealNode::install("plugin-connect", "quorum-mysql-operator", &[]).await;
    let clusters: Api<mysql_operator::crd::MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let cluster: mysql_operator::crd::MySQLCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.quorum.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": "shop"},
        "spec": {
            "replicas": 1, "flavor": "MariaDB",
            "version": mysql_operator::packaging::DEFAULT_MARIADB_IMAGE_TAG,
            "storage": {"size": "1Gi", "storageClassName": quorum_e2e::real_node::STORAGE_CLASS},
            "podTemplate": quorum_e2e::real_node::pod_overrides(),
        }
    }))
    .unwrap();
    clusters.create(&PostParams::default(), &cluster).await.unwrap();
    wait::until("a primary", Duration::from_secs(180), || async {
        let cluster = clusters.get("shop").await.map_err(|e| e.to_string())?;
        cluster
            .status
            .and_then(|s| s.primary)
            .ok_or_else(|| "no primary yet".to_string())
    })
    .await;

    // Not a terminal: the client reads statements from its arguments and prints plain rows.
    let session = stdout(
        &plugin(
            &setup.ns,
            &[
                "connect",
                "mysql/shop",
                "--",
                "-N",
                "-e",
                "SELECT CONCAT('read-', @@read_only)",
            ],
        )
        .await,
    );
    assert_eq!(session.trim(), "read-OFF", "the primary, writable: {session}");

    // The password the session used is the one `credentials` shows when asked, and only then.
    let hidden = stdout(&plugin(&setup.ns, &["credentials", "mysql/shop"]).await);
    let shown: serde_json::Value = serde_json::from_str(&stdout(
        &plugin(
            &setup.ns,
            &["credentials", "mysql/shop", "--show-password", "-o", "json"],
        )
        .await,
    ))
    .unwrap();
    let password = shown["passwords"][0]
        .as_str()
        .expect("root's password")
        .to_string();
    assert!(password.len() >= 16, "a generated password: {shown}");
    assert!(!hidden.contains(&password), "{hidden}");
    let primary = clusters
        .get("shop")
        .await
        .unwrap()
        .status
        .unwrap()
        .primary
        .unwrap();
    let logged_in = quorum_e2e::real_node::exec(
        &setup.ns,
        &primary,
        "mysqld",
        &[
            "sh",
            "-c",
            "mariadb -uroot -p\"$1\" -h\"$POD_IP\" -N -e 'SELECT CURRENT_USER()'",
            "sh",
            &password,
        ],
    );
    assert!(
        logged_in.trim().starts_with("root@"),
        "the password shown logs in: {logged_in}"
    );

    let refused = plugin(&setup.ns, &["connect", "mysql/absent"]).await;
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains(&format!("MySQLCluster/absent in {}", setup.ns)),
        "{message}"
    );
    setup.remove().await;
}
