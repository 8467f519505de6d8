//! A StatefulSet made before its operator managed rolls (the API server's default
//! `RollingUpdate`, with the `rollingUpdate.partition: 0` it defaults in) is taken over to
//! `OnDelete` without a pod restarting, against the real API server: applying `OnDelete` alone
//! is refused there, which would fail every pass of every existing cluster.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{StatefulSet, StatefulSetSpec},
        core::v1::{Container, PodSpec, PodTemplateSpec},
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::{Api, api::PatchParams};
use quorum_core::rollout::{needs_take_over, operator_managed_updates, take_over_updates};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

const MANAGER: &str = "rollout-test-operator";

fn statefulset(namespace: &str, managed: bool) -> StatefulSet {
    let labels = BTreeMap::from([("app".to_string(), "rollout".to_string())]);
    StatefulSet {
        metadata: ObjectMeta {
            name: Some("members".into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(0),
            service_name: Some("members".into()),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            update_strategy: managed.then(operator_managed_updates),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "server".into(),
                        image: Some("registry.invalid/rollout:1".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

#[tokio::test]
async fn a_statefulset_made_before_managed_rolls_is_taken_over_without_a_new_template() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "rollout").await;
    let ns = namespace.name().to_string();
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let apply = |managed: bool| {
        let api = api.clone();
        let object = statefulset(&ns, managed);
        async move {
            api.patch(
                "members",
                &PatchParams::apply(MANAGER).force(),
                &kube::api::Patch::Apply(&object),
            )
            .await
        }
    };

    let before = apply(false).await.unwrap();
    assert!(
        needs_take_over(&before),
        "{:?}",
        before.spec.as_ref().map(|spec| &spec.update_strategy)
    );
    let refused = apply(true).await;
    assert!(
        refused.is_err(),
        "the API server took OnDelete over a defaulted rollingUpdate: {refused:?}"
    );

    // A StatefulSet observed before it was replaced under its name is not patched.
    let mut replaced = before.clone();
    replaced.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let refused = take_over_updates(&client, &replaced).await;
    assert!(refused.is_err(), "{refused:?}");
    take_over_updates(&client, &before).await.unwrap();
    let after = apply(true).await.unwrap();
    assert!(!needs_take_over(&after));
    let strategy = after.spec.as_ref().unwrap().update_strategy.clone().unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("OnDelete"));
    assert!(strategy.rolling_update.is_none(), "{strategy:?}");
    assert_eq!(
        after.spec.unwrap().template,
        before.spec.unwrap().template,
        "the pod template, and so every pod, is left as it was"
    );
    namespace.delete().await;
}
