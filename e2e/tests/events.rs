//! Events as the operators publish them, against the real API server: one per distinct note,
//! a repeat of the same words counted in its series.

use k8s_openapi::api::{core::v1::ConfigMap, events::v1::Event};
use kube::{
    Api,
    api::{ListParams, PostParams},
};
use quorum_core::events::{EventPublisher, Severity};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

#[tokio::test]
async fn each_note_of_a_reason_is_its_own_event_and_a_repeated_one_is_counted() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "events").await;
    let object = Api::<ConfigMap>::namespaced(client.clone(), namespace.name())
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("cluster".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let events = EventPublisher::new(client.clone(), "events-test", Some("events-test-0".into()));
    for note in ["member 3 added", "member 4 added", "member 3 added"] {
        events
            .publish(
                &object,
                Severity::Normal,
                "MemberAdded",
                "Reconcile",
                note.to_string(),
            )
            .await;
    }

    let mut found: Vec<(String, i32, String, String)> =
        Api::<Event>::namespaced(client.clone(), namespace.name())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|event| {
                (
                    event.note.unwrap_or_default(),
                    event.series.map_or(1, |series| series.count),
                    event.reporting_instance.unwrap_or_default(),
                    event.regarding.and_then(|r| r.name).unwrap_or_default(),
                )
            })
            .collect();
    found.sort();
    let expected = |note: &str, count| {
        (
            note.to_string(),
            count,
            "events-test-0".to_string(),
            "cluster".to_string(),
        )
    };
    assert_eq!(
        found,
        vec![expected("member 3 added", 2), expected("member 4 added", 1)]
    );
}
