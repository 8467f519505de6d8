//! The KWOK fake nodes the reconciliation tests schedule pods on behave as a node that does not
//! fail: a pod the node lifecycle controller marked not ready (as it does when it misses a
//! node's heartbeat on a loaded machine) is made Ready again, as a kubelet would once it
//! reports the node again. Without it, an operator rightly waits for ever for a pod that no
//! process will ever make Ready.

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::{Container, Pod, PodSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client},
    wait,
};

fn ready(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.as_str())
}

async fn until_ready(pods: &Api<Pod>, name: &str, what: &str) {
    wait::until(what, Duration::from_secs(60), || async {
        let pod = pods.get(name).await.map_err(|e| e.to_string())?;
        match ready(&pod) {
            Some("True") => Ok(()),
            other => Err(format!("Ready {other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn a_pod_marked_not_ready_on_a_fake_node_is_made_ready_again() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "fake-nodes").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.name());
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("member".into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some("kwok-node-1".into()),
            containers: vec![Container {
                name: "server".into(),
                image: Some("registry.invalid/member:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    };
    pods.create(&PostParams::default(), &pod).await.unwrap();
    until_ready(&pods, "member", "the fake node to start the pod").await;

    // What the node lifecycle controller writes (MarkPodsNotReady): Ready False, nothing else.
    let not_ready = serde_json::json!({
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}
    });
    // The patch's answer is the pod as the mark left it: KWOK may make it Ready again before
    // any later read.
    let marked = pods
        .patch_status("member", &PatchParams::default(), &Patch::Strategic(&not_ready))
        .await
        .unwrap();
    assert_eq!(ready(&marked), Some("False"), "the mark did not take");

    until_ready(&pods, "member", "the fake node to make the pod Ready again").await;
    namespace.delete().await;
}
