//! A test that fails leaves its namespace's objects, events and logs on disk for whoever reads
//! the failure (the namespace itself goes when the cluster stops).

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client},
    diagnostics::diagnostics_root,
};

#[tokio::test]
async fn a_failed_test_leaves_its_namespaces_objects_behind() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "diagnostics").await;
    let name = namespace.name().to_string();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
    let marker = ConfigMap {
        metadata: ObjectMeta {
            name: Some("left-for-the-reader".into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("key".into(), "value".into())])),
        ..ConfigMap::default()
    };
    config_maps.create(&PostParams::default(), &marker).await.unwrap();

    // The namespace's owner fails: it is dropped while its thread unwinds.
    let failing = std::thread::spawn(move || {
        let _namespace = namespace;
        panic!("a test that fails");
    });
    assert!(failing.join().is_err());

    let directory = diagnostics_root().join(&name);
    let objects = std::fs::read_to_string(directory.join("objects.txt")).unwrap();
    assert!(objects.contains("configmap/left-for-the-reader"), "{objects}");
    assert!(directory.join("events.txt").exists());

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    namespaces
        .delete(&name, &DeleteParams::background())
        .await
        .unwrap();
    std::fs::remove_dir_all(directory).unwrap();
}
