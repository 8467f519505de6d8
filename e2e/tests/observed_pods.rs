//! What a pass does to member pods it acts on exactly the pods it observed, against the real API
//! server: a pod deleted and created again under the same name since (a member restarted this
//! pass) is neither labelled from what was true of the one before it nor restarted again.

use k8s_openapi::{
    api::core::v1::{Container, Pod, PodSpec},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use quorum_core::{role_labels::LabelledPods, rollout::restart_pod};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

const ROLE: &str = "test.quorum.dev/role";

fn member(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), "role-labels".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            // Bound to a node that does not exist: the object is all this test needs.
            node_name: Some("no-such-node".into()),
            containers: vec![Container {
                name: "server".into(),
                image: Some("registry.invalid/member:1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Deletes pod `name` at once and creates it again, as its controller would after a restart;
/// returns the new pod.
async fn created_again(pods: &Api<Pod>, name: &str) -> Pod {
    let immediately = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(name, &immediately).await.unwrap();
    quorum_e2e::wait::until(
        &format!("{name} gone"),
        std::time::Duration::from_secs(30),
        || async {
            match pods.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        },
    )
    .await;
    pods.create(&PostParams::default(), &member(name)).await.unwrap()
}

#[tokio::test]
async fn a_pod_created_again_since_the_pass_listed_it_is_left_to_the_next_pass() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "role-labels").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.name());
    for name in ["member-0", "member-1"] {
        pods.create(&PostParams::default(), &member(name)).await.unwrap();
    }
    let list = || async {
        pods.list(&ListParams::default().labels("app=role-labels"))
            .await
            .unwrap()
            .items
    };
    let mut listed = LabelledPods::new(list().await, ROLE);

    // member-1 is restarted after the listing: deleted, and created again by its controller.
    created_again(&pods, "member-1").await;

    listed
        .set(&client, namespace.name(), |_| Some("primary"))
        .await
        .expect("a pod gone since the listing is not an error");
    let role = |pod: &Pod| pod.labels().get(ROLE).cloned();
    assert_eq!(
        role(&pods.get("member-0").await.unwrap()).as_deref(),
        Some("primary")
    );
    assert_eq!(
        role(&pods.get("member-1").await.unwrap()),
        None,
        "the new member-1 was labelled from what the pass saw of the old one"
    );

    // The next pass lists the new pod and labels it.
    let mut next = LabelledPods::new(list().await, ROLE);
    next.set(&client, namespace.name(), |_| Some("replica"))
        .await
        .unwrap();
    for pod in list().await {
        assert_eq!(role(&pod).as_deref(), Some("replica"), "{}", pod.name_any());
    }
    namespace.delete().await;
}

#[tokio::test]
async fn a_restart_deletes_the_pod_observed_and_never_the_one_created_again_since() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "restart-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace.name());
    let observed = pods
        .create(&PostParams::default(), &member("member-0"))
        .await
        .unwrap();
    let observed_uid = observed.uid().unwrap();

    // Restarted already (by an earlier attempt of the same step), and created again.
    let again = created_again(&pods, "member-0").await;

    restart_pod(&client, namespace.name(), "member-0", &observed_uid)
        .await
        .expect("a restart of a pod that is gone already is done");
    assert_eq!(
        pods.get("member-0").await.unwrap().uid(),
        again.uid(),
        "the pod created again was restarted too"
    );
    restart_pod(&client, namespace.name(), "member-0", &again.uid().unwrap())
        .await
        .unwrap();
    let deleted = pods.get_opt("member-0").await.unwrap();
    assert!(
        deleted.is_none_or(|pod| pod.metadata.deletion_timestamp.is_some()),
        "the pod observed is deleted"
    );
    namespace.delete().await;
}
