//! Every package upgrades through its channel with real OLM v0 (`quorum_e2e::olm`): the
//! catalog holds, for each package, the committed bundle (N) and the bundle the generator
//! writes for the next version (N+1, which `replaces` N and skips everything older), with the
//! channel entries the generator writes for both, all inline and served by one `opm serve`.
//! In a namespace of its own, each package is subscribed at N with manual approval; OLM then
//! offers N+1 on its own, and once approved brings it to `Succeeded` in N's place, removes N's
//! CSV and permissions, makes N+1's, and runs N+1's image. What the operator does across an
//! upgrade (a cluster made under N reconciled under N+1's permissions) is
//! `operators/etcd/tests/olm_upgrade.rs`.

use kube::Client;
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client},
    olm::{CatalogServer, Olm, OlmApis, write_inline_catalog},
    tools::repository_root,
};
use serde_json::Value;
use xtask::bundle::{Release, catalog_text, next_patch, package_documents, write_bundle};

const SOURCE: &str = "quorum-upgrades";

#[tokio::test]
async fn every_package_upgrades_through_its_channel_with_olm() {
    let admin: Client = admin_client().await;
    let scratch = std::env::temp_dir().join(format!("quorum-olm-upgrades-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let current = Release::current();
    let next = current.followed_by(&next_patch(&current.version).expect("a semantic version"));
    let operators = xtask::operators();
    assert_eq!(operators.len(), 4, "every packaged operator");

    // One catalog: each package's channels listing N and N+1, every bundle inline.
    let mut documents: Vec<Value> = Vec::new();
    let mut bundles = Vec::new();
    for operator in &operators {
        let next_bundle = scratch.join("next").join(operator.package);
        write_bundle(operator, &next, &next_bundle).expect("the next bundle");
        documents.extend(package_documents(operator, &[current.clone(), next.clone()]));
        bundles.push(repository_root().join("bundle").join(operator.package));
        bundles.push(next_bundle);
    }
    let catalog_dir = scratch.join("catalog");
    write_inline_catalog(
        &catalog_dir,
        &catalog_text(&documents).expect("catalog"),
        &bundles,
    );
    let mut opm_serve = CatalogServer::start(&catalog_dir, &scratch).await;
    let mut olm = Olm::start(&admin, &scratch).await;

    let mut upgraded = Vec::new();
    for operator in &operators {
        let package = operator.package;
        let (from, to) = (current.csv_name(package), next.csv_name(package));
        let namespace = TestNamespace::create(&admin, "olm-upgrade").await;
        let apis = OlmApis::new(&admin, namespace.name());
        apis.add_catalog(&mut olm, SOURCE, opm_serve.port).await;
        let (first, _) = apis.install_at(&mut olm, package, SOURCE, &from).await;
        let deployment = apis.upgrade(&mut olm, package, &first, &from, &to).await;
        let image = deployment
            .spec
            .and_then(|spec| spec.template.spec)
            .and_then(|spec| spec.containers.into_iter().next())
            .and_then(|container| container.image);
        assert_eq!(
            image,
            Some(xtask::image::reference(operator, &next.version)),
            "{package}: N+1's image"
        );
        apis.uninstall(&mut olm, package, &to).await;
        upgraded.push((apis, namespace));
    }
    olm.assert_running();
    opm_serve.assert_running();

    drop(olm);
    drop(opm_serve);
    for (apis, namespace) in upgraded {
        apis.remove_cluster_rbac(&admin).await;
        namespace.delete().await;
    }
    let _ = std::fs::remove_dir_all(scratch);
}
