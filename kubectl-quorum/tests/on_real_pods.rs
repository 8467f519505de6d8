//! `kubectl quorum connect` and `credentials` against members that run as users run them: a
//! MariaDB cluster of real pods on the real node, its operator installed by its chart. The
//! session opens the server's own client in the primary's container and logs in with the
//! password the member reads, which the user never types.

use std::time::Duration;

use kube::{Api, api::PostParams};
use mysql_operator::crd::MySQLCluster;
use quorum_e2e::{
    control_plane,
    real_node::{self, STORAGE_CLASS},
    real_pods::OnRealNode,
    tools::kubectl_binary,
    wait,
};

/// Runs the plugin in `namespace`, with the local control plane's kubeconfig and its kubectl.
fn plugin(namespace: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-quorum"))
        .env("KUBECONFIG", control_plane::kubeconfig_path())
        .env("KUBECTL", kubectl_binary())
        .arg("--namespace")
        .arg(namespace)
        .args(args)
        .output()
        .expect("run kubectl-quorum")
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "kubectl-quorum failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8")
}

#[tokio::test]
async fn connect_opens_the_servers_own_client_on_the_primary_without_the_user_typing_a_password() {
    let setup = OnRealNode::install("plugin-connect", "quorum-mysql-operator", &[]).await;
    let clusters: Api<MySQLCluster> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let cluster: MySQLCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.quorum.dev/v1alpha1",
        "kind": "MySQLCluster",
        "metadata": {"name": "shop"},
        "spec": {
            "replicas": 1, "flavor": "MariaDB",
            "version": mysql_operator::packaging::DEFAULT_MARIADB_IMAGE_TAG,
            "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS},
            "podTemplate": real_node::pod_overrides(),
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
    let session = stdout(&plugin(
        &setup.ns,
        &[
            "connect",
            "mysql/shop",
            "--",
            "-N",
            "-e",
            "SELECT CONCAT('read-', @@read_only)",
        ],
    ));
    assert_eq!(session.trim(), "read-0", "the primary, writable: {session}");

    // The password the session used is the one `credentials` shows when asked, and only then.
    let hidden = stdout(&plugin(&setup.ns, &["credentials", "mysql/shop"]));
    let shown: serde_json::Value = serde_json::from_str(&stdout(&plugin(
        &setup.ns,
        &["credentials", "mysql/shop", "--show-password", "-o", "json"],
    )))
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
    let logged_in = real_node::exec(
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

    let refused = plugin(&setup.ns, &["connect", "mysql/absent"]);
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains(&format!("MySQLCluster/absent in {}", setup.ns)),
        "{message}"
    );
    setup.remove().await;
}
