//! Admission against the real API server: the odd-members policy (an even member count is
//! accepted with a warning that names the field; an odd count gets no warning), the name limit,
//! and a table of every field of the `EtcdCluster` and `EtcdBackup` specs.

use std::{process::Command, time::Duration};

use etcd_operator::{admission::odd_members_policy, crd::EtcdCluster};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd, kubeconfig_path},
    tools::{cache_root, pinned_version},
    wait,
};

fn kubectl(namespace: &str, manifest: &str) -> (bool, String) {
    let binary = cache_root()
        .join("bin")
        .join(format!("k8s-{}", pinned_version("K8S_VERSION")))
        .join("kubectl");
    let mut child = Command::new(binary)
        .args([
            "--kubeconfig",
            &kubeconfig_path().display().to_string(),
            "-n",
            namespace,
            "apply",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn manifest(name: &str, replicas: i32) -> String {
    format!(
        "apiVersion: etcd.quorum.dev/v1alpha1\nkind: EtcdCluster\nmetadata: {{name: {name}}}\n\
         spec: {{replicas: {replicas}, version: \"3.6.16\", storage: {{size: 1Gi}}}}\n"
    )
}

#[tokio::test]
async fn even_member_counts_are_accepted_with_a_warning_naming_the_field() {
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    let (policy, binding) = odd_members_policy();
    let apply = PatchParams::apply("quorum-e2e").force();
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(client.clone())
        .patch(
            policy.metadata.name.as_deref().unwrap(),
            &apply,
            &Patch::Apply(&policy),
        )
        .await
        .unwrap();
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(client.clone())
        .patch(
            binding.metadata.name.as_deref().unwrap(),
            &apply,
            &Patch::Apply(&binding),
        )
        .await
        .unwrap();
    let namespace = TestNamespace::create(&client, "etcd-admission").await;
    let ns = namespace.name().to_string();

    // The policy takes effect once the API server has loaded and type-checked it.
    let mut attempt = 0;
    let warning = wait::until("the even-count warning", Duration::from_secs(30), || {
        attempt += 1;
        let (accepted, stderr) = kubectl(&ns, &manifest(&format!("even-{attempt}"), 4));
        async move {
            assert!(accepted, "an even count is allowed: {stderr}");
            if stderr.contains("Warning") {
                Ok(stderr)
            } else {
                Err(stderr)
            }
        }
    })
    .await;
    assert!(warning.contains("spec.replicas: 4"), "{warning}");
    assert!(warning.contains("odd count is recommended"), "{warning}");

    let (accepted, stderr) = kubectl(&ns, &manifest("odd", 3));
    assert!(accepted, "{stderr}");
    assert!(
        !stderr.contains("Warning"),
        "no warning for an odd count: {stderr}"
    );
    namespace.delete().await;
}

/// A name too long for the StatefulSet (whose pods get a label made of its name and a hash) is
/// refused at admission rather than failing pod creation later.
#[tokio::test]
async fn names_too_long_for_the_statefulset_are_refused_naming_metadata_name() {
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-long-name").await;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), namespace.name());
    let spec: etcd_operator::crd::EtcdClusterSpec =
        serde_yaml::from_str("{replicas: 3, version: \"3.6.16\", storage: {size: 1Gi}}").unwrap();
    quorum_e2e::control_plane::assert_names_limited_to(&clusters, etcd_operator::crd::MAX_NAME, |name| {
        EtcdCluster::new(name, spec.clone())
    })
    .await;
    namespace.delete().await;
}

/// Every field of the `EtcdCluster` and `EtcdBackup` specs is checked at admission: what the
/// operator could not build is refused with a message naming the field, boundary values are
/// accepted, and version and TLS changes follow what etcd supports.
#[tokio::test]
async fn every_field_of_the_spec_is_validated_naming_the_field() {
    use etcd_operator::crd::EtcdBackup;
    use quorum_e2e::admission::{self, Row, spec};
    use serde_json::json;

    let (clusters, backups) = (EtcdCluster::crd(), EtcdBackup::crd());
    let valid: etcd_operator::crd::EtcdClusterSpec =
        serde_yaml::from_str("{replicas: 3, version: \"3.6.16\", storage: {size: 1Gi}}").unwrap();
    let valid = serde_json::to_value(EtcdCluster::new("valid", valid)).unwrap();
    let version = |version: &str| spec(json!({"version": version}));
    let tls = |tls: serde_json::Value| spec(json!({"tls": tls}));

    let mut rows = admission::cluster_rows();
    rows.extend([
        Row::refused("no members", spec(json!({"replicas": 0})), &["spec.replicas"]),
        Row::refused("ten members", spec(json!({"replicas": 10})), &["spec.replicas"]),
        Row::accepted("one member", spec(json!({"replicas": 1}))),
        Row::accepted("nine members", spec(json!({"replicas": 9}))),
        Row::refused("etcd 3.4", version("3.4.27"), &["spec.version"]),
        Row::refused("a version without a patch", version("3.6"), &["spec.version"]),
        Row::update_refused(
            "a downgrade",
            json!({}),
            version("3.5.35"),
            &["spec.version", "downgrades"],
        ),
        Row::update_refused(
            "a skipped minor version",
            version("3.5.35"),
            version("3.7.0"),
            &["spec.version", "one minor version at a time"],
        ),
        Row::update_accepted("the next minor version", version("3.5.35"), version("3.6.16")),
        Row::update_accepted("a patch release", json!({}), version("3.6.17")),
        Row::refused(
            "a client certificate Secret that is no object name",
            tls(json!({"clientSecretName": "Etcd_TLS"})),
            &["spec.tls.clientSecretName"],
        ),
        Row::refused(
            "a peer certificate Secret that is no object name",
            tls(json!({"peerSecretName": "peer tls"})),
            &["spec.tls.peerSecretName"],
        ),
        Row::accepted(
            "client and peer TLS",
            tls(json!({"clientSecretName": "etcd-client-tls", "peerSecretName": "etcd.peer.tls"})),
        ),
        Row::update_refused(
            "TLS turned on after creation",
            json!({}),
            tls(json!({"clientSecretName": "etcd-client-tls"})),
            &["spec.tls", "tls is immutable"],
        ),
        Row::update_refused(
            "TLS turned off after creation",
            tls(json!({"clientSecretName": "etcd-client-tls"})),
            spec(json!({"tls": null})),
            &["spec.tls", "tls is immutable"],
        ),
        Row::update_refused(
            "peer TLS added after creation",
            tls(json!({"clientSecretName": "etcd-client-tls"})),
            tls(json!({"peerSecretName": "etcd-peer-tls"})),
            &["spec.tls", "tls is immutable"],
        ),
    ]);
    admission::check_engine("etcd-every-field", &clusters, &valid, &rows, &backups).await;
}
