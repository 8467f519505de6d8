//! An upgrade through the channel with real OLM v0 (the machinery of `olm.rs`,
//! `quorum_e2e::olm`). The catalog's channel holds two versions of the package: the committed
//! bundle (N) and the bundle the generator writes for the next version (N+1, which `replaces`
//! N and skips everything older), with the channel entries the generator writes for both.
//! A Subscription starting at N with manual approval installs N; the operator, under the
//! ServiceAccount OLM created, brings the `alm-examples` EtcdCluster to Ready with real etcd
//! members. OLM then offers N+1 on its own (a second InstallPlan), and once approved installs
//! it, brings its CSV to `Succeeded` and removes N's CSV and permissions. The cluster created
//! under N is the same object afterwards, and the operator, restarted under N+1's permissions
//! only, still reconciles it.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{EtcdBackup, EtcdCluster},
    reconcile::MemberAddresses,
    resources::client_service_name,
};
use k8s_openapi::api::core::v1::Service;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, service_account_client},
    local_members::{EtcdLauncher, LocalMembers},
    olm::{CatalogServer, Olm, OlmApis, alm_example, write_inline_catalog},
    tools::{etcd_binary, repository_root},
    wait,
};
use serde_json::{Value, json};
use xtask::bundle::{Release, catalog_text, next_patch, package_documents, write_bundle};

const BUNDLE: &str = "bundle/quorum-etcd-operator";
const PACKAGE: &str = "quorum-etcd-operator";
const SOURCE: &str = "quorum-upgrade";

#[tokio::test]
async fn the_operator_upgrades_through_the_channel_with_olm_and_keeps_reconciling_its_clusters() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let admin = admin_client().await;
    let namespace = TestNamespace::create(&admin, "etcd-olm-up").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-olm-{ns}"));
    std::fs::create_dir_all(&scratch).expect("scratch directory");

    // N is the committed bundle; N+1 is what the generator writes for the next version.
    let package = xtask::operators()
        .into_iter()
        .find(|operator| operator.package == PACKAGE)
        .expect("the etcd operator is packaged");
    let current = Release::current();
    let next = current.followed_by(&next_patch(&current.version).expect("a semantic version"));
    let (from, to) = (current.csv_name(PACKAGE), next.csv_name(PACKAGE));
    let next_bundle = scratch.join("next-bundle");
    write_bundle(&package, &next, &next_bundle).expect("the next bundle");
    let next_csv: Value = serde_yaml::from_str(
        &std::fs::read_to_string(next_bundle.join(format!("manifests/{PACKAGE}.clusterserviceversion.yaml")))
            .expect("the next CSV"),
    )
    .expect("the next CSV is YAML");
    assert_eq!(next_csv["metadata"]["name"], json!(to));
    assert_eq!(next_csv["spec"]["replaces"], json!(from), "{}", next_csv["spec"]);
    assert_eq!(
        next_csv["metadata"]["annotations"]["olm.skipRange"],
        json!(format!("<{}", next.version))
    );

    // The channel with both, as the generator writes it; both bundles inline.
    let catalog_dir = scratch.join("catalog");
    let index =
        catalog_text(&package_documents(&package, &[current.clone(), next.clone()])).expect("catalog");
    let rendered = write_inline_catalog(
        &catalog_dir,
        &index,
        &[repository_root().join(BUNDLE), next_bundle.clone()],
    );
    for (bundle, name) in rendered.iter().zip([&from, &to]) {
        let bundle: Value = serde_json::from_str(bundle).expect("opm renders JSON");
        assert_eq!(&bundle["name"], &json!(name));
    }
    let mut opm_serve = CatalogServer::start(&catalog_dir, &scratch).await;
    let mut olm = Olm::start(&admin, &scratch).await;
    let apis = OlmApis::new(&admin, &ns);
    apis.add_catalog(&mut olm, SOURCE, opm_serve.port).await;

    // Installed at N. Manual approval holds N+1 back until the cluster exists under N.
    let (first, installed) = apis.install_at(&mut olm, PACKAGE, SOURCE, &from).await;

    // Under N: the example cluster, reconciled by the operator with OLM's ServiceAccount.
    let example = alm_example(&installed, "EtcdCluster");
    let cluster_name = example["metadata"]["name"].as_str().expect("a name").to_string();
    let version = example["spec"]["version"]
        .as_str()
        .expect("a version")
        .to_string();
    let _members = LocalMembers::start(
        admin.clone(),
        EtcdLauncher::new(BTreeMap::from([(version, etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let as_operator = service_account_client(&admin, &ns, PACKAGE).await;
    let operator = support::operator::start_with(as_operator, &ns, MemberAddresses::Loopback, true);
    let example: EtcdCluster = serde_json::from_value(example).expect("the example is an EtcdCluster");
    let replicas = usize::try_from(example.spec.replicas).expect("positive replicas");
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), &ns);
    let created = clusters.create(&PostParams::default(), &example).await.unwrap();
    let before = support::ready_with(&clusters, &cluster_name, replicas, Duration::from_secs(120)).await;

    // N+1: OLM finds it in the channel and plans the upgrade by itself; N's CSV and
    // permissions go, N+1's Deployment runs N+1's image.
    let deployment = apis.upgrade(&mut olm, PACKAGE, &first, &from, &to).await;
    let image = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|spec| spec.containers.into_iter().next())
        .and_then(|container| container.image);
    assert_eq!(image, Some(xtask::image::reference(&package, &next.version)));

    // The cluster created under N is the same object, Ready with the same leader.
    let after = support::ready_with(&clusters, &cluster_name, replicas, Duration::from_secs(60)).await;
    assert_eq!(
        clusters.get(&cluster_name).await.unwrap().uid(),
        created.uid(),
        "the EtcdCluster survived the upgrade"
    );
    assert_eq!(after.leader, before.leader, "no member changed hands");

    // The operator as N+1's Deployment runs it: a new process under N+1's permissions only,
    // still reconciling the cluster (a deleted Service is put back).
    operator.stop().await;
    let as_operator = service_account_client(&admin, &ns, PACKAGE).await;
    let operator = support::operator::start_with(as_operator, &ns, MemberAddresses::Loopback, true);
    let services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let service_name = client_service_name(&cluster_name);
    let old = services.get(&service_name).await.expect("the client Service");
    services
        .delete(&service_name, &DeleteParams::default())
        .await
        .unwrap();
    wait::until(
        "the client Service recreated under N+1",
        Duration::from_secs(60),
        || {
            let services = services.clone();
            let (service_name, old_uid) = (service_name.clone(), old.uid());
            async move {
                match services.get_opt(&service_name).await.map_err(|e| e.to_string())? {
                    Some(service) if service.uid() != old_uid => Ok(()),
                    other => Err(format!("{:?}", other.map(|service| service.uid()))),
                }
            }
        },
    )
    .await;
    support::ready_with(&clusters, &cluster_name, replicas, Duration::from_secs(60)).await;
    olm.assert_running();
    opm_serve.assert_running();

    operator.stop().await;
    let _ = clusters
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<EtcdBackup>::namespaced(admin.clone(), &ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    apis.uninstall(&mut olm, PACKAGE, &to).await;
    drop(olm);
    drop(opm_serve);
    apis.remove_cluster_rbac(&admin).await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}
