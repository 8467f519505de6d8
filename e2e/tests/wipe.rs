//! Wiping a member (`quorum_core::wipe::wipe_member`) and reading the claim a repair records with
//! the pod it wipes (`quorum_core::repair::standing_claim`), against the real API server: pods and
//! claims are only objects here, which no kubelet runs.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, PodSpec, VolumeResourceRequirements,
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use kube::{Api, api::PostParams};
use quorum_core::{repair::standing_claim, wipe::wipe_member};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "server".into(),
                image: Some("registry.invalid/server:1".into()),
                ..Container::default()
            }],
            // Scheduled nowhere: a pod bound to no node is deleted at once.
            node_selector: Some(BTreeMap::from([(
                "quorum.dev/wipe-test".to_string(),
                "nowhere".to_string(),
            )])),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn claim(name: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), Quantity("1Gi".into()))])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// A wipe decided on one pod leaves a pod created again under its name since, and that pod's
/// claim, alone (the next pass decides on the pod now there); decided on the pod now there, it
/// deletes the pod and its claim, after which the member has no standing claim.
#[tokio::test]
async fn a_wipe_deletes_only_the_pod_it_was_decided_on_with_its_claim() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "wipe").await;
    let ns = namespace.name();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let params = PostParams::default();
    let decided_on = pods.create(&params, &pod("demo-1")).await.unwrap().metadata.uid;
    let volume = claims
        .create(&params, &claim("data-demo-1"))
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(standing_claim(&client, ns, "demo-1").await.unwrap(), volume);
    assert_eq!(standing_claim(&client, ns, "demo-2").await.unwrap(), None);

    // Deleted and made again under its name before the wipe reached it.
    pods.delete("demo-1", &Default::default()).await.unwrap();
    let now_there = pods.create(&params, &pod("demo-1")).await.unwrap().metadata.uid;
    assert_ne!(now_there, decided_on);
    wipe_member(&client, ns, "demo-1", decided_on).await.unwrap();
    assert_eq!(
        pods.get_opt("demo-1")
            .await
            .unwrap()
            .and_then(|pod| pod.metadata.uid),
        now_there,
        "the pod made again was deleted by a wipe decided on the one before it"
    );
    assert_eq!(
        standing_claim(&client, ns, "demo-1").await.unwrap(),
        volume,
        "the claim of the pod made again was deleted by a wipe decided on the one before it"
    );

    wipe_member(&client, ns, "demo-1", now_there).await.unwrap();
    assert_eq!(pods.get_opt("demo-1").await.unwrap(), None);
    let left = claims.get_opt("data-demo-1").await.unwrap();
    assert!(
        left.as_ref()
            .is_none_or(|claim| claim.metadata.deletion_timestamp.is_some()),
        "{left:?}"
    );
    assert_eq!(standing_claim(&client, ns, "demo-1").await.unwrap(), None);
    namespace.delete().await;
}
