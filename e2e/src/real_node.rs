//! The local control plane's real node (`e2e/real-node.sh`): a kubelet with containerd and runc,
//! kube-proxy, CoreDNS and a volume provisioner, where pods are real containers from the images
//! `e2e/images.sh` built and imported. Tests that claim to show what a user runs put the operator
//! (through its chart) and the members (through the cluster's pod template) there, and reach the
//! databases through their Services' cluster IPs, as a client in the cluster would.
//!
//! The node is tainted while KWOK nodes exist, so a pod lands on it only when it carries
//! [`tolerations`] and [`node_selector`]. Tests fail loudly when the node is not Ready.

use std::{collections::BTreeMap, process::Output, time::Duration};

use k8s_openapi::api::core::v1::{Node, Pod, Service, Toleration};
use kube::{Api, Client};

use crate::{
    control_plane::kubeconfig_path,
    tools::{kubectl_binary, run_tool, transcript},
    wait,
};

/// The real node's name.
pub const NODE_NAME: &str = "quorum-node";
/// The taint that keeps pods off the real node unless they tolerate it.
pub const TAINT_KEY: &str = "quorum.dev/real-node";
/// The dynamic provisioner's StorageClass: a claim deleted loses its data.
pub const STORAGE_CLASS: &str = "local-path";
/// The pod network: real pods get their addresses from it.
pub const POD_NETWORK_PREFIX: &str = "10.244.0.";
/// The node's OCI registry (e2e/real-node.sh), from which containerd pulls what pods name at
/// ghcr.io and quay.io.
pub const REGISTRY: &str = "127.0.0.1:5000";

/// The node selector that picks the real node.
pub fn node_selector() -> BTreeMap<String, String> {
    BTreeMap::from([("type".to_string(), "real".to_string())])
}

/// The toleration of the real node's taint.
pub fn tolerations() -> Vec<Toleration> {
    vec![Toleration {
        key: Some(TAINT_KEY.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }]
}

/// Pod overrides (a cluster's `spec.podTemplate`) that place its members on the real node.
pub fn pod_overrides() -> quorum_core::crd::PodOverrides {
    quorum_core::crd::PodOverrides {
        node_selector: node_selector(),
        tolerations: tolerations(),
        ..quorum_core::crd::PodOverrides::default()
    }
}

/// `--set` values that place a chart's operator Deployment on the real node.
pub fn chart_settings() -> Vec<String> {
    vec![
        "nodeSelector.type=real".to_string(),
        format!("tolerations[0].key={TAINT_KEY}"),
        "tolerations[0].operator=Exists".to_string(),
        "tolerations[0].effect=NoSchedule".to_string(),
    ]
}

/// Creates `namespace` if it does not exist, with the node selector and default toleration
/// that put every pod made in it on the real node (the API server's PodNodeSelector and
/// PodTolerationRestriction admission), for pods whose spec no test writes: OLM's, its
/// catalogs', its unpack Jobs', the operators' and the members' it installs, and those of
/// the samples the README applies as they are.
pub async fn namespace_on_real_node(admin: &Client, namespace: &str) {
    let toleration = serde_json::json!([{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
    let annotations = serde_json::json!({
        "scheduler.alpha.kubernetes.io/node-selector": "type=real",
        "scheduler.alpha.kubernetes.io/defaultTolerations": toleration.to_string(),
    });
    apply_namespace_annotations(admin, namespace, annotations).await;
}

/// Takes back what [`namespace_on_real_node`] set on `namespace` (the annotations it applied,
/// by its field manager), for a namespace the tests do not own, such as `default`.
pub async fn namespace_off_real_node(admin: &Client, namespace: &str) {
    apply_namespace_annotations(admin, namespace, serde_json::json!({})).await;
}

/// Server-side apply of `annotations` on `namespace` by the real node's field manager: what it
/// applied before and does not apply now is removed.
async fn apply_namespace_annotations(admin: &Client, namespace: &str, annotations: serde_json::Value) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let wanted = serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "annotations": annotations}
    });
    namespaces
        .patch(
            namespace,
            &kube::api::PatchParams::apply("quorum-real-node-test").force(),
            &kube::api::Patch::Apply(wanted),
        )
        .await
        .unwrap_or_else(|error| panic!("namespace {namespace}, annotations {annotations}: {error}"));
}

/// Fails the test unless the real node is Ready.
pub async fn require(admin: &Client) {
    let node = Api::<Node>::all(admin.clone())
        .get(NODE_NAME)
        .await
        .unwrap_or_else(|error| {
            panic!("the real node {NODE_NAME} is not registered ({error}): e2e/cluster.sh start")
        });
    let ready = node
        .status
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .into_iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True");
    assert!(ready, "the real node {NODE_NAME} is not Ready");
    assert_no_disk_eviction();
}

/// Every image on the node was imported and none can be pulled, so a kubelet that reclaims disk
/// by deleting unused images (the pause image among them) leaves the node unable to start pods
/// for the rest of the run. The disk is shared, so its free space can drop below any threshold.
fn assert_no_disk_eviction() {
    let (command, output) = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE_NAME}/proxy/configz"),
    ]);
    assert!(output.status.success(), "{}", transcript(&command, &output));
    let configz: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "the kubelet's configuration is not JSON ({error}): {}",
            transcript(&command, &output)
        )
    });
    let thresholds = &configz["kubeletconfig"]["evictionHard"];
    for signal in [
        "nodefs.available",
        "imagefs.available",
        "nodefs.inodesFree",
        "imagefs.inodesFree",
    ] {
        let value = thresholds[signal].as_str();
        assert!(
            matches!(value, Some("0%") | Some("100%")),
            "the real node evicts on {signal} ({value:?} in {thresholds}): it would delete imported images; \
             e2e/real-node.sh sets it to \"0%\""
        );
    }
}

/// Whether every container of the pod passed its readiness probe.
pub fn pod_ready(pod: &Pod) -> bool {
    quorum_core::pod::is_ready(pod)
}

/// Whether the pod's container `container` has started and not ended.
pub fn container_running(pod: &Pod, container: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == container))
        .and_then(|status| status.state.as_ref())
        .is_some_and(|state| state.running.is_some())
}

/// How often the kubelet restarted the pod's container `container`.
pub fn restart_count(pod: &Pod, container: &str) -> i32 {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == container))
        .map_or(0, |status| status.restart_count)
}

/// Asserts the pod runs on the real node with an address from the pod network.
pub fn assert_on_real_node(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let node = pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref());
    assert_eq!(node, Some(NODE_NAME), "{name} is not on the real node");
    let ip = pod
        .status
        .as_ref()
        .and_then(|status| status.pod_ip.as_deref())
        .unwrap_or_default();
    assert!(
        ip.starts_with(POD_NETWORK_PREFIX),
        "{name} has no address from the pod network: {ip:?}"
    );
}

/// Waits until the pod `name` exists and is Ready, and returns it.
pub async fn wait_pod_ready(admin: &Client, namespace: &str, name: &str, timeout: Duration) -> Pod {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    wait::until(&format!("pod {namespace}/{name} Ready"), timeout, || async {
        let pod = pods.get(name).await.map_err(|error| error.to_string())?;
        if pod_ready(&pod) {
            Ok(pod)
        } else {
            Err(format!(
                "{:?}",
                pod.status.and_then(|status| status.container_statuses)
            ))
        }
    })
    .await
}

/// Waits until no pod matches `selector`, up to `timeout`; a timeout is an error saying how
/// many are left.
pub async fn pods_gone(pods: &Api<Pod>, selector: &str, what: &str, timeout: Duration) -> Result<(), String> {
    wait::within(what, timeout, || async {
        let left = pods
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .map_err(|error| error.to_string())?
            .items
            .len();
        (left == 0).then_some(()).ok_or(format!("{left} left"))
    })
    .await
}

/// The Service's cluster IP: how a test on the host reaches the pods behind it (kube-proxy
/// routes it; the host cannot resolve cluster DNS names).
pub async fn cluster_ip(admin: &Client, namespace: &str, service: &str) -> String {
    let service_object = Api::<Service>::namespaced(admin.clone(), namespace)
        .get(service)
        .await
        .unwrap_or_else(|error| panic!("Service {namespace}/{service}: {error}"));
    service_object
        .spec
        .and_then(|spec| spec.cluster_ip)
        .filter(|ip| ip != "None")
        .unwrap_or_else(|| panic!("Service {namespace}/{service} has no cluster IP"))
}

/// The real node's containerd socket (`e2e/real-node.sh`).
pub fn containerd_socket() -> std::path::PathBuf {
    std::env::var_os("QUORUM_CLUSTER_DIR")
        .map_or_else(
            || crate::tools::cache_root().join("cluster"),
            std::path::PathBuf::from,
        )
        .join("node/containerd/containerd.sock")
}

/// The containerd id of `container` in `pod`.
fn container_id(pod: &Pod, container: &str) -> String {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|status| status.name == container))
        .and_then(|status| status.container_id.as_deref())
        .and_then(|id| id.strip_prefix("containerd://"))
        .unwrap_or_else(|| panic!("{name} has no running {container} container"))
        .to_string()
}

/// The host process id of `container`'s main process in `pod` (`ctr tasks ls`).
pub fn container_pid(pod: &Pod, container: &str) -> u32 {
    let id = container_id(pod, container);
    let socket = containerd_socket().display().to_string();
    let (command, output) = run_tool(
        std::path::Path::new("ctr"),
        &["--address", &socket, "-n", "k8s.io", "tasks", "ls"],
        None,
    );
    assert!(output.status.success(), "{}", transcript(&command, &output));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| {
            let mut columns = line.split_whitespace();
            (columns.next() == Some(id.as_str())).then(|| columns.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("containerd lists no task {id}: {}", transcript(&command, &output)))
}

/// What the kernel says of a container's main process: what the pod's security context promised,
/// checked where it is enforced rather than in the pod's spec.
#[derive(Debug)]
pub struct ProcessConfinement {
    /// Real, effective, saved and file-system user ids.
    pub uids: Vec<u32>,
    /// The effective capability set (hex, as `/proc/PID/status` writes it).
    pub effective_capabilities: String,
    pub no_new_privileges: bool,
    /// The options of the container's root mount (`ro` when read-only).
    pub root_mount_options: String,
}

impl ProcessConfinement {
    /// Reads `/proc/PID/status` and `/proc/PID/mountinfo` of `container`'s main process in `pod`.
    pub fn of(pod: &Pod, container: &str) -> Self {
        let pid = container_pid(pod, container);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|error| panic!("/proc/{pid}/status: {error}"));
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
                .to_string()
        };
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap_or_else(|error| panic!("/proc/{pid}/mountinfo: {error}"));
        // Fields: id, parent, major:minor, root, mount point, options, ...; the last mount on
        // `/` is the one the process sees.
        let root_mount_options = mountinfo
            .lines()
            .rev()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|fields| fields.get(4) == Some(&"/"))
            .and_then(|fields| fields.get(5).map(|options| options.to_string()))
            .unwrap_or_else(|| panic!("no root mount in /proc/{pid}/mountinfo"));
        Self {
            uids: field("Uid:")
                .split_whitespace()
                .map(|uid| uid.parse().expect("a uid"))
                .collect(),
            effective_capabilities: field("CapEff:"),
            no_new_privileges: field("NoNewPrivs:") == "1",
            root_mount_options,
        }
    }

    /// Asserts a non-root user, no capabilities, no privilege escalation and a read-only root.
    pub fn assert_restricted(&self, what: &str) {
        assert!(
            !self.uids.is_empty() && self.uids.iter().all(|uid| *uid != 0),
            "{what} runs as root: {self:?}"
        );
        assert!(
            self.effective_capabilities.chars().all(|digit| digit == '0'),
            "{what} holds capabilities: {self:?}"
        );
        assert!(self.no_new_privileges, "{what} may gain privileges: {self:?}");
        assert!(
            self.root_mount_options.split(',').any(|option| option == "ro"),
            "{what}'s root file system is writable: {self:?}"
        );
    }
}

/// Kills the main process of `container` in `pod` with SIGKILL, as a crash or the kernel's OOM
/// killer would, leaving the pod in place for the kubelet to restart the container.
pub fn kill_container(pod: &Pod, container: &str) {
    container_task(pod, container, &["kill", "-s", "SIGKILL"]);
}

/// Freezes every process of `container` in `pod` (containerd's `tasks pause`, the cgroup
/// freezer), as a server hung for good would be: it answers no command, while its pod stays in
/// place. [`thaw_container`] lets it run again.
pub fn freeze_container(pod: &Pod, container: &str) {
    container_task(pod, container, &["pause"]);
}

/// Lets a container frozen by [`freeze_container`] run again.
pub fn thaw_container(pod: &Pod, container: &str) {
    container_task(pod, container, &["resume"]);
}

/// `ctr tasks VERB...` on `container`'s task in `pod`.
fn container_task(pod: &Pod, container: &str, verb: &[&str]) {
    let id = container_id(pod, container);
    let socket = containerd_socket().display().to_string();
    let mut args = vec!["--address", &socket, "-n", "k8s.io", "tasks"];
    args.extend_from_slice(verb);
    args.push(&id);
    let (command, output) = run_tool(std::path::Path::new("ctr"), &args, None);
    assert!(output.status.success(), "{}", transcript(&command, &output));
}

/// `kubectl ARGS` against the local control plane (what a user types): the command line and
/// what it did.
pub fn kubectl(args: &[&str]) -> (String, Output) {
    let kubeconfig = kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str()];
    all.extend_from_slice(args);
    run_tool(&kubectl_binary(), &all, None)
}

/// `kubectl exec` of `command` in `container` of pod `namespace/pod`; panics with the transcript
/// unless it exits 0, and returns its standard output.
pub fn exec(namespace: &str, pod: &str, container: &str, command: &[&str]) -> String {
    let mut args = vec!["exec", "-n", namespace, pod, "-c", container, "--"];
    args.extend_from_slice(command);
    let (command, output) = kubectl(&args);
    assert!(output.status.success(), "{}", transcript(&command, &output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl logs` of `container` in pod `namespace/pod`.
pub fn logs(namespace: &str, pod: &str, container: &str) -> String {
    let (command, output) = kubectl(&["logs", "-n", namespace, pod, "-c", container]);
    assert!(output.status.success(), "{}", transcript(&command, &output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::ProcessConfinement;

    fn confined() -> ProcessConfinement {
        ProcessConfinement {
            uids: vec![65532; 4],
            effective_capabilities: "0000000000000000".into(),
            no_new_privileges: true,
            root_mount_options: "ro,relatime".into(),
        }
    }

    #[test]
    fn a_confined_process_passes() {
        confined().assert_restricted("confined");
    }

    #[test]
    fn each_broken_promise_is_caught() {
        type Breaking = fn(&mut ProcessConfinement);
        let broken: [(&str, Breaking); 4] = [
            ("root", |c| c.uids[1] = 0),
            ("capabilities", |c| {
                c.effective_capabilities = "0000000000000400".into()
            }),
            ("privileges", |c| c.no_new_privileges = false),
            ("writable", |c| c.root_mount_options = "rw,relatime".into()),
        ];
        for (what, breaking) in broken {
            let mut confinement = confined();
            breaking(&mut confinement);
            let failed = std::panic::catch_unwind(|| confinement.assert_restricted(what)).is_err();
            assert!(failed, "{what} passed");
        }
    }
}
