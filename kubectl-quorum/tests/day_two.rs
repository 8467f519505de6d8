//! The README's "Day two" walk-through, run as it is written: its shell blocks are read from
//! README.md and run in order with `bash`, with the control plane's kubectl and this build of
//! `kubectl-quorum` on `PATH`, against what `make demo` leaves for it: the MySQL operator
//! installed by its chart (here watching `default`), and the `shop` sample Ready in namespace
//! `default` on the real node. After each block the test checks that it did what the README
//! says it does.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use mysql_operator::crd::{MySQLBackup, MySQLCluster};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, kubeconfig_path},
    helm::ChartRelease,
    real_node,
    tools::kubectl_binary,
};

/// The namespace the demo leaves its samples in, which the walk-through's commands use.
const NAMESPACE: &str = "default";
const CHART: &str = "quorum-mysql-operator";
/// What the walk-through creates, deleted before it runs and after.
const LEFTOVERS: &[&[&str]] = &[
    &["mysqlbackups", "--all"],
    &["mysqlcluster", "shop", "shop-copy"],
    &["deployment,service,secret", "demo-backup-store"],
    &["secret", "shop-app-password"],
    &[
        "pvc",
        "data-shop-0",
        "data-shop-1",
        "data-shop-2",
        "data-shop-copy-0",
        "data-shop-copy-1",
        "data-shop-copy-2",
    ],
];

fn repository_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The shell blocks of README.md's "Day two" section, in order.
fn walk_through() -> Vec<String> {
    let readme = std::fs::read_to_string(repository_root().join("README.md")).expect("README.md");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Day two\n"))
        .expect("a \"Day two\" section in README.md");
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|line| *line != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

/// Runs `block` as the README's reader would, from the repository's root; its standard output.
async fn run(block: &str, path: &str) -> String {
    eprintln!("---- running ----\n{block}");
    let output = tokio::time::timeout(
        Duration::from_secs(25 * 60),
        tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-x", "-c", block])
            .current_dir(repository_root())
            .env("KUBECONFIG", kubeconfig_path())
            .env("PATH", path)
            .output(),
    )
    .await
    .expect("the block ends within its kubectl waits' timeouts")
    .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("---- stdout ----\n{stdout}---- stderr ----\n{stderr}");
    assert!(output.status.success(), "the block failed: {}", output.status);
    stdout
}

/// `kubectl args`, which must succeed; its standard output.
fn kubectl_succeeds(args: &[&str]) -> String {
    let (command, output) = real_node::kubectl(args);
    assert!(
        output.status.success(),
        "{}",
        quorum_e2e::tools::transcript(&command, &output)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Deletes what the walk-through creates in `default`, waiting until it is gone.
fn remove_leftovers() {
    for leftover in LEFTOVERS {
        let mut args = vec!["delete", "-n", NAMESPACE, "--ignore-not-found", "--timeout=300s"];
        args.extend_from_slice(leftover);
        kubectl_succeeds(&args);
    }
}

/// The operators of earlier runs that failed (left for inspection) watch `default` too, and two
/// operators acting on one cluster fight. Called after `remove_leftovers`: the clusters go
/// first, while those operators still run to remove their finalizers.
fn remove_earlier_runs() {
    let namespaces = kubectl_succeeds(&["get", "namespaces", "-o", "name"]);
    let earlier_runs: Vec<&str> = namespaces
        .lines()
        .filter(|name| name.starts_with("namespace/day-two-"))
        .collect();
    if !earlier_runs.is_empty() {
        let mut args = vec!["delete", "--wait", "--timeout=300s"];
        args.extend(earlier_runs);
        kubectl_succeeds(&args);
    }
}

/// The config digest each of `shop`'s member pods runs with.
async fn config_digests(pods: &Api<Pod>) -> Vec<Option<String>> {
    let members = "app.kubernetes.io/component=member,app.kubernetes.io/instance=shop";
    pods.list(&ListParams::default().labels(members))
        .await
        .expect("list shop's pods")
        .items
        .iter()
        .map(|pod| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(quorum_core::pod::CONFIG_DIGEST_ANNOTATION))
                .cloned()
        })
        .collect()
}

/// `make demo`'s MariaDB cluster: the sample as it is, but for the storage class, which the
/// demo's control plane makes the default and the tests' does not.
async fn create_the_demos_shop(admin: &Client) {
    let sample =
        std::fs::read_to_string(repository_root().join("samples/mysql-cluster.yaml")).expect("sample");
    let mut documents = sample.split("\n---\n");
    let (secret, cluster) = (documents.next().unwrap(), documents.next().unwrap());
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_yaml::from_str(secret).expect("the sample's Secret");
    let mut cluster: MySQLCluster = serde_yaml::from_str(cluster).expect("the sample's MySQLCluster");
    cluster.spec.storage.storage_class_name = Some(real_node::STORAGE_CLASS.into());
    cluster.spec.pod_template = Some(real_node::pod_overrides());
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the sample's Secret");
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), NAMESPACE);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .expect("create the sample's MySQLCluster");
    let (command, output) = real_node::kubectl(&[
        "wait",
        "-n",
        NAMESPACE,
        "mysqlcluster/shop",
        "--for=condition=Ready",
        "--timeout=600s",
    ]);
    assert!(
        output.status.success(),
        "{}",
        quorum_e2e::tools::transcript(&command, &output)
    );
}

#[tokio::test]
async fn the_readmes_day_two_walk_through_works_as_written() {
    let blocks = walk_through();
    assert_eq!(
        blocks.len(),
        5,
        "the walk-through's steps, each checked below: {blocks:#?}"
    );
    let admin = admin_client().await;
    real_node::require(&admin).await;
    remove_leftovers();
    remove_earlier_runs();
    real_node::namespace_on_real_node(&admin, NAMESPACE).await;
    let operator_namespace = TestNamespace::create(&admin, "day-two").await;
    let watched = format!("watchNamespaces={{{},{NAMESPACE}}}", operator_namespace.name());
    let chart = ChartRelease::install_on_real_node(
        &admin,
        CHART,
        operator_namespace.name(),
        &[&watched, "backups.allowHttp=true"],
    )
    .await;
    create_the_demos_shop(&admin).await;

    // The commands as a reader runs them: kubectl, and the plugin it finds on PATH.
    let tools = std::env::temp_dir().join(format!("quorum-{}-path", operator_namespace.name()));
    std::fs::create_dir_all(&tools).expect("a directory for PATH");
    for (name, binary) in [
        ("kubectl", kubectl_binary()),
        (
            "kubectl-quorum",
            PathBuf::from(env!("CARGO_BIN_EXE_kubectl-quorum")),
        ),
    ] {
        let link = tools.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(binary, link).expect("a link on PATH");
    }
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let clusters: Api<MySQLCluster> = Api::namespaced(admin.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let status = |name: &'static str| {
        let clusters = clusters.clone();
        async move {
            clusters
                .get(name)
                .await
                .unwrap_or_else(|error| panic!("read {name}: {error}"))
                .status
                .unwrap_or_default()
        }
    };

    // 1. Status, and rows to keep.
    let seen = run(&blocks[0], &path).await;
    assert!(
        seen.starts_with("MySQLCluster/shop in default: Ready True"),
        "{seen}"
    );
    for member in ["shop-0", "shop-1", "shop-2"] {
        assert!(seen.contains(member), "status names {member}: {seen}");
    }
    let old_primary = status("shop").await.primary.expect("a primary");
    assert_ne!(old_primary, "shop-2", "the walk-through switches over to shop-2");

    // 2. A switchover to shop-2.
    let seen = run(&blocks[1], &path).await;
    assert_eq!(status("shop").await.primary.as_deref(), Some("shop-2"));
    assert!(
        seen.contains("MySQLCluster/shop in default: Ready True\n  primary: shop-2\n"),
        "shop-2 takes writes: {seen}"
    );

    // 3. A backup now, restored into a new cluster holding the rows of step 1.
    let seen = run(&blocks[2], &path).await;
    assert_eq!(seen.lines().last(), Some("3"), "the restored copy's rows: {seen}");
    let backup = Api::<MySQLBackup>::namespaced(admin.clone(), NAMESPACE)
        .get("shop-before-upgrade")
        .await
        .expect("the walk-through's backup");
    let stored = backup.status.and_then(|status| status.run.last_snapshot);
    assert!(stored.is_some(), "the backup recorded its stored object");
    assert!(
        status("shop-copy").await.restored_from.is_some(),
        "shop-copy records what it was restored from"
    );

    // 4. A roll: every member on the new configuration, one at a time, the primary last.
    let before = config_digests(&pods).await;
    let seen = run(&blocks[3], &path).await;
    let after = config_digests(&pods).await;
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(
        after.iter().all(|digest| digest.is_some() && *digest == after[0]),
        "every member on one configuration after the roll: {after:?}"
    );
    assert!(
        before.iter().all(|digest| *digest != after[0]),
        "no member ran the new configuration before: {before:?} -> {after:?}"
    );
    let rolled = status("shop").await;
    assert!(rolled.in_flight.is_none(), "{:?}", rolled.in_flight);
    assert_ne!(
        rolled.primary.as_deref(),
        Some("shop-2"),
        "the primary restarted last, after a handover: {seen}"
    );

    // 5. Paused, shown as paused, resumed.
    let seen = run(&blocks[4], &path).await;
    assert!(seen.contains("reconciliation PAUSED"), "{seen}");
    let resumed = clusters.get("shop").await.expect("shop");
    assert!(
        !quorum_core::runner::is_paused(&resumed),
        "resumed: {:?}",
        resumed.metadata.annotations
    );

    remove_leftovers();
    real_node::namespace_off_real_node(&admin, NAMESPACE).await;
    chart.uninstall();
    operator_namespace.delete().await;
    let _ = std::fs::remove_dir_all(tools);
}
