//! The Kubernetes half of the etcd operator against the real local control plane: objects
//! and owner references, a deleted Service recreated, the scale subresource, status and
//! conditions. Pods here are KWOK fakes with nothing listening, so every member is Unknown:
//! the operator must bootstrap the objects and then wait, never guess.

use std::time::Duration;

use crate::support;

use etcd_operator::{
    crd::{EtcdCluster, EtcdClusterSpec},
    reconcile::MemberAddresses,
};
use k8s_openapi::{
    api::{
        apps::v1::StatefulSet,
        core::v1::{ConfigMap, Event, Service},
        policy::v1::PodDisruptionBudget,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::config::LogFormat;
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    wait,
};

fn spec(replicas: i32) -> EtcdClusterSpec {
    support::cluster_spec(replicas, None)
}

async fn get<K>(api: &Api<K>, name: &str) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait::until(&format!("{name} to exist"), Duration::from_secs(30), || async {
        api.get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "absent".to_string())
    })
    .await
}

#[tokio::test]
async fn creates_owned_objects_recreates_them_scales_and_reports_unknown_members_honestly() {
    quorum_core::telemetry::init(LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    // The operator also runs the EtcdBackup controller, which needs its CRD.
    install_crd(&client, &etcd_operator::crd::EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd").await;
    let ns = namespace.name().to_string();
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Dns);

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    let created = clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec(3)))
        .await
        .expect("create EtcdCluster");
    let uid = created.uid().unwrap();
    let owned = |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
        refs.as_ref()
            .is_some_and(|r| r.iter().any(|o| o.uid == uid && o.controller == Some(true)))
    };

    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    let statefulset = get(&statefulsets, "main").await;
    assert!(owned(&statefulset.metadata.owner_references));
    assert_eq!(
        statefulset.spec.as_ref().unwrap().replicas,
        Some(3),
        "bootstrap starts all members"
    );
    let peer = get(&services, "main-peer").await;
    assert!(owned(&peer.metadata.owner_references));
    assert_eq!(peer.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let client_service = get(&services, "main").await;
    assert!(owned(&client_service.metadata.owner_references));
    let budget = get(&budgets, "main").await;
    assert!(owned(&budget.metadata.owner_references));
    let config = get(&configs, "main-config").await;
    assert!(owned(&config.metadata.owner_references));
    let data = config.data.unwrap();
    assert_eq!(data["ETCD_INITIAL_CLUSTER_STATE"], "new");
    assert!(data["ETCD_INITIAL_CLUSTER"].contains("main-2=http://main-2.main-peer."));

    // KWOK runs the pods; the StatefulSet controller counts them ready.
    wait::until("three ready pods", Duration::from_secs(60), || async {
        let s = statefulsets.get("main").await.map_err(|e| e.to_string())?;
        let ready = s.status.and_then(|s| s.ready_replicas).unwrap_or(0);
        if ready == 3 {
            Ok(())
        } else {
            Err(format!("{ready} ready"))
        }
    })
    .await;

    // A deleted Service comes back.
    services.delete("main", &DeleteParams::default()).await.unwrap();
    wait::until(
        "the client Service to be recreated",
        Duration::from_secs(30),
        || async {
            match services.get_opt("main").await.map_err(|e| e.to_string())? {
                Some(s) if s.uid() != client_service.uid() => Ok(()),
                other => Err(format!("{:?}", other.map(|s| s.uid()))),
            }
        },
    )
    .await;

    // Nothing answers at the members' addresses: the status says so, and the cluster is not
    // called ready on the strength of pod readiness alone.
    let status = wait::until("status with conditions", Duration::from_secs(30), || async {
        let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
        let status = cluster.status.clone().unwrap_or_default();
        let has = |type_: &str| status.conditions.iter().any(|c| c.type_ == type_);
        // The pass's three. `PodsFailing` appears only once a pod has failed (see
        // `an_etcd_pod_no_node_can_take_is_reported_on_its_cluster`).
        if ["Ready", "Progressing", "Degraded"]
            .iter()
            .all(|type_| has(type_))
        {
            Ok(status)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    let condition = |type_: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
            .clone()
    };
    assert_eq!(condition("Ready").status, "False");
    assert_eq!(condition("Ready").reason, "NoMemberReachable");
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.type_ != "PodsFailing" || c.status == "False"),
        "KWOK runs every pod: {:?}",
        status.conditions
    );
    assert_eq!(condition("Progressing").reason, "Bootstrapping");
    assert_eq!(
        condition("Ready").observed_generation,
        created.metadata.generation
    );
    assert_eq!(
        status.selector,
        "app.kubernetes.io/component=member,app.kubernetes.io/instance=main,app.kubernetes.io/name=etcd"
    );

    // The scale subresource (what `kubectl scale` uses) sets spec.replicas; the operator does
    // not touch the StatefulSet until members can be observed.
    clusters
        .patch_scale(
            "main",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "replicas": 5 } })),
        )
        .await
        .expect("scale");
    let scale = clusters.get_scale("main").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(5));
    assert_eq!(
        scale.status.unwrap().selector.as_deref(),
        Some(status.selector.as_str())
    );
    assert_eq!(clusters.get("main").await.unwrap().spec.replicas, 5);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        statefulsets.get("main").await.unwrap().spec.unwrap().replicas,
        Some(3),
        "no membership change on Unknown members"
    );

    // Invalid input is refused by the schema, naming the field.
    let mut bad = EtcdCluster::new("bad", spec(3));
    bad.spec.version = "3.4.0".into();
    let error = clusters
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("spec.version"), "{error}");
    let mut resized = clusters.get("main").await.unwrap();
    resized.spec.storage.size = Quantity("2Gi".into());
    let error = clusters
        .replace("main", &PostParams::default(), &resized)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("storage is immutable"), "{error}");
    for refused in ["3.5.17", "3.8.0"] {
        let mut changed = clusters.get("main").await.unwrap();
        changed.spec.version = refused.into();
        let error = clusters
            .replace("main", &PostParams::default(), &changed)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("upgrade one minor version at a time"),
            "{refused}: {error}"
        );
    }

    operator.stop().await;
    namespace.delete().await;
}

/// A Service someone else made under the name of the cluster's client Service is neither adopted
/// nor changed: the cluster reports it (`Degraded`, reason `ObjectNotOwned`, a warning event
/// naming it) and takes no further step until it is gone.
#[tokio::test]
async fn a_same_name_service_not_controlled_by_the_cluster_is_reported_and_left_untouched() {
    quorum_core::telemetry::init(LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &etcd_operator::crd::EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-foreign").await;
    let ns = namespace.name().to_string();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let theirs: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "main", "labels": {"app": "someone-else"}},
        "spec": {"selector": {"app": "someone-else"}, "ports": [{"name": "web", "port": 8080}]},
    }))
    .unwrap();
    let theirs = services.create(&PostParams::default(), &theirs).await.unwrap();
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Dns);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec(3)))
        .await
        .expect("create EtcdCluster");

    let degraded = wait::until(
        "the cluster to report the Service in the way",
        Duration::from_secs(30),
        || async {
            let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
            let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
            conditions
                .iter()
                .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "ObjectNotOwned")
                .cloned()
                .ok_or_else(|| format!("{conditions:?}"))
        },
    )
    .await;
    assert!(
        degraded
            .message
            .contains("Service main was not created by this cluster"),
        "{}",
        degraded.message
    );
    assert!(
        degraded
            .message
            .contains(&format!("kubectl delete service -n {ns} main")),
        "{}",
        degraded.message
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let warning = wait::until("the ObjectNotOwned event", Duration::from_secs(30), || async {
        events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ObjectNotOwned"))
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(
        warning.related.as_ref().and_then(|r| r.name.as_deref()),
        Some("main"),
        "the event names the Service as its related object"
    );

    let now = services.get("main").await.unwrap();
    assert_eq!(
        now.resource_version(),
        theirs.resource_version(),
        "their Service is not written"
    );
    assert_eq!(now.metadata.owner_references, None);
    assert!(
        statefulsets.get_opt("main").await.unwrap().is_none(),
        "no member is started while the cluster's Service is someone else's"
    );

    // Once it is gone the cluster makes its own and goes on.
    services.delete("main", &DeleteParams::default()).await.unwrap();
    let uid = clusters.get("main").await.unwrap().uid().unwrap();
    wait::until(
        "the cluster's own Service and StatefulSet",
        Duration::from_secs(30),
        || async {
            let service = services.get_opt("main").await.map_err(|e| e.to_string())?;
            let controlled = service
                .and_then(|s| s.metadata.owner_references)
                .is_some_and(|refs| refs.iter().any(|r| r.uid == uid && r.controller == Some(true)));
            let statefulset = statefulsets.get_opt("main").await.map_err(|e| e.to_string())?;
            if controlled && statefulset.is_some() {
                Ok(())
            } else {
                Err(format!(
                    "service controlled: {controlled}, statefulset: {}",
                    statefulset.is_some()
                ))
            }
        },
    )
    .await;

    operator.stop().await;
    namespace.delete().await;
}

/// etcd's member pods are found by the report of pods that cannot start (they carry the
/// cluster's instance and `app.kubernetes.io/name` labels): a pod no node can take is named in
/// the cluster's `PodsFailing` condition.
#[tokio::test]
async fn an_etcd_pod_no_node_can_take_is_reported_on_its_cluster() {
    quorum_core::telemetry::init(LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &etcd_operator::crd::EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-unplaced").await;
    let ns = namespace.name().to_string();
    let _operator = support::operator::start(client.clone(), &ns, MemberAddresses::Dns);

    let mut unplaceable = spec(1);
    unplaceable.pod_template = Some(quorum_core::crd::PodOverrides {
        node_selector: [("quorum.dev/no-such-node".to_string(), "true".to_string())].into(),
        ..quorum_core::crd::PodOverrides::default()
    });
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &EtcdCluster::new("stuck", unplaceable))
        .await
        .expect("create EtcdCluster");

    let failing = wait::until("PodsFailing on the cluster", Duration::from_secs(60), || async {
        let cluster = clusters.get("stuck").await.map_err(|e| e.to_string())?;
        let conditions = cluster.status.map(|s| s.conditions).unwrap_or_default();
        conditions
            .into_iter()
            .find(|c| c.type_ == "PodsFailing" && c.status == "True")
            .ok_or_else(|| "no PodsFailing=True yet".to_string())
    })
    .await;
    assert_eq!(failing.reason, "Unschedulable");
    assert!(failing.message.contains("stuck-0"), "{}", failing.message);
    namespace.delete().await;
}

/// Writers of different status fields of one cluster at once (the backups of one cluster
/// recording `lastBackup` as they finish, beside the cluster's own reconciler): each write is
/// bound to the cluster by its version, and one that meets another's newer version is not lost
/// but repeated on the cluster as it is now, however many others came between.
#[tokio::test]
async fn concurrent_status_writers_of_different_fields_all_land() {
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-status-writers").await;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), namespace.name());
    let cluster = clusters
        .create(&PostParams::default(), &EtcdCluster::new("main", spec(3)))
        .await
        .unwrap();
    let fields = [
        ("leader", serde_json::json!("main-0")),
        ("lostLeader", serde_json::json!("main-1")),
        ("version", serde_json::json!("3.5.21")),
        ("clusterId", serde_json::json!("c0ffee")),
        ("selector", serde_json::json!("app=main")),
        ("observedGeneration", serde_json::json!(1)),
        ("replicas", serde_json::json!(3)),
    ];
    let writes = fields.iter().map(|(field, value)| {
        let (clusters, cluster) = (&clusters, &cluster);
        async move {
            let patch = serde_json::json!({ "status": { *field: value } });
            let version = cluster.resource_version();
            (
                *field,
                quorum_core::status::merge_status_of(clusters, cluster, version, &patch).await,
            )
        }
    });
    for (field, written) in futures::future::join_all(writes).await {
        assert!(matches!(written, Ok(Some(_))), "{field}: {written:?}");
    }
    let stored = serde_json::to_value(clusters.get("main").await.unwrap().status).unwrap();
    for (field, value) in &fields {
        assert_eq!(&stored[field], value, "{field} in {stored}");
    }
    namespace.delete().await;
}
