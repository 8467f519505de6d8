//! OLM as a user's cluster runs it, on the real node: OLM's own chart with its images pulled
//! from the node's registry (e2e/real-node.sh), and what `cargo xtask publish` pushes there
//! (every bundle image and the catalog image) under the names the catalog and the README give
//! them. For each package, in a namespace of its own: the README's CatalogSource (the catalog
//! image), an OperatorGroup targeting the namespace, a Subscription at N with manual approval.
//! Then the catalog pod serves, the bundle unpack Job runs, the CSV succeeds, its Deployment's
//! pod runs our image from the registry on the real node with `WATCH_NAMESPACES` from the
//! OperatorGroup's target, and the operator reconciles the CSV's example; for the etcd
//! operator, the upgrade to N+1 through the channel does the same with N+1's bundle and image.

use std::{collections::BTreeMap, path::Path, time::Duration};

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod};
use kube::{
    Api, Client,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams},
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client},
    olm::{Olm, OlmApis, alm_example},
    real_node::{self, REGISTRY},
    tools::{repository_root, succeeds},
    wait,
};
use serde_json::Value;
use xtask::{
    OperatorPackage,
    bundle::{
        CATALOG_IMAGE, Release, bundle_documents, bundle_image, catalog_text, next_patch, package_documents,
    },
    image, publish_releases,
    registry::{Destination, push},
};

const SOURCE: &str = "quorum";

#[tokio::test]
async fn olm_in_the_cluster_installs_every_package_from_the_registry_and_upgrades_one() {
    let admin: Client = admin_client().await;
    real_node::require(&admin).await;
    let scratch = std::env::temp_dir().join(format!("quorum-olm-in-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let current = Release::current();
    let next = current.followed_by(&next_patch(&current.version).expect("a semantic version"));
    let operators = xtask::operators();

    // Building and pushing block (pushes run their own runtime): off this test's runtime.
    let built = {
        let (scratch, current, next) = (scratch.clone(), current.clone(), next.clone());
        tokio::task::spawn_blocking(move || publish_everything(&scratch, &current, &next))
            .await
            .expect("publishing")
    };

    let reference = |name: &str| {
        built
            .keys()
            .find(|reference| reference.starts_with(&format!("quay.io/operator-framework/{name}:")))
            .cloned()
            .unwrap_or_else(|| panic!("no {name} image built: {:?}", built.keys()))
    };
    let mut olm = Olm::in_cluster(&admin, &scratch, &reference("olm"), &reference("opm")).await;
    let olm_pods = Api::<Pod>::namespaced(admin.clone(), quorum_e2e::olm::OLM_NAMESPACE)
        .list(&ListParams::default())
        .await
        .unwrap();
    for pod in olm_pods.items.iter().filter(|pod| real_node::pod_ready(pod)) {
        real_node::assert_on_real_node(pod);
    }

    let mut installed = Vec::new();
    for operator in &operators {
        let package = operator.package;
        let (from, to) = (current.csv_name(package), next.csv_name(package));
        let namespace = TestNamespace::create(&admin, "olm-cluster").await;
        real_node::namespace_on_real_node(&admin, namespace.name()).await;
        let apis = OlmApis::new(&admin, namespace.name());
        apis.add_catalog_image(&mut olm, SOURCE, &format!("{CATALOG_IMAGE}:latest"))
            .await;
        catalog_pod_serves(&admin, namespace.name()).await;

        let (plan, csv) = apis.install_at(&mut olm, package, SOURCE, &from).await;
        bundle_unpacked(
            &admin,
            namespace.name(),
            &bundle_image(operator, &current.version),
        )
        .await;
        operator_pod_runs(
            &admin,
            namespace.name(),
            package,
            &image::reference(operator, &current.version),
        )
        .await;
        reconciles_its_example(&admin, namespace.name(), &csv, operator).await;

        // One package goes on to N+1 (every package's upgrade is `olm_upgrades.rs`'s, inline).
        let installed_csv = if operator.engine == "etcd" {
            apis.upgrade(&mut olm, package, &plan, &from, &to).await;
            bundle_unpacked(&admin, namespace.name(), &bundle_image(operator, &next.version)).await;
            let upgraded_image = image::reference(operator, &next.version);
            operator_pod_runs(&admin, namespace.name(), package, &upgraded_image).await;
            to
        } else {
            from
        };
        apis.uninstall(&mut olm, package, &installed_csv).await;
        installed.push((apis, namespace));
    }

    drop(olm);
    for (apis, namespace) in installed {
        apis.remove_cluster_rbac(&admin).await;
        namespace.delete().await;
    }
    let _ = std::fs::remove_dir_all(scratch);
}

/// Pushes OLM's and opm's images, and the operators' (N's binary also under N+1's tag: the
/// upgrade changes the bundle, not the program), where the node pulls ghcr.io and quay.io; then
/// every bundle at N and N+1 and a catalog whose channels hold both, as `cargo xtask publish`
/// pushes them. Returns the images built: reference → layout.
fn publish_everything(
    scratch: &Path,
    current: &Release,
    next: &Release,
) -> BTreeMap<String, std::path::PathBuf> {
    let operators = xtask::operators();
    let built = built_images(&["olm", "operators"], scratch);
    for (reference, layout) in &built {
        let tag = reference.rsplit_once(':').expect("a tag").1;
        let mut destinations = vec![reference.clone()];
        if reference.starts_with("ghcr.io/quorum-dev/") {
            destinations.push(reference.replace(&image::tag(&current.version), &image::tag(&next.version)));
        }
        for destination in destinations {
            push(
                layout,
                tag,
                &Destination::mirrored(&destination, REGISTRY).unwrap(),
            )
            .unwrap_or_else(|error| panic!("pushing {destination}: {error:#}"));
        }
    }
    let mut documents: Vec<Value> = Vec::new();
    for operator in &operators {
        let releases = [current.clone(), next.clone()];
        documents.extend(package_documents(operator, &releases));
        documents.extend(bundle_documents(operator, &releases));
    }
    let catalog = catalog_text(&documents).expect("the catalog");
    let pushed = publish_releases(
        &[current.clone(), next.clone()],
        &catalog,
        &["latest"],
        REGISTRY,
        &scratch.join("published"),
    )
    .unwrap_or_else(|error| panic!("cargo xtask publish: {error:#}"));
    assert_eq!(pushed.len(), operators.len() * 2 + 1, "{pushed:?}");
    built
}

/// `e2e/images.sh build GROUP` for each group, each archive unpacked into an OCI layout under
/// `scratch`: reference → layout.
fn built_images(groups: &[&str], scratch: &Path) -> BTreeMap<String, std::path::PathBuf> {
    let script = repository_root().join("e2e/images.sh");
    let mut built = BTreeMap::new();
    for group in groups {
        let (listed, _) = succeeds(&script, &["build", group], None);
        for line in listed.lines().filter(|line| !line.trim().is_empty()) {
            let (reference, archive) = line.split_once(' ').unwrap_or_else(|| panic!("{line:?}"));
            let layout = scratch.join("layouts").join(reference.replace(['/', ':'], "_"));
            std::fs::create_dir_all(&layout).unwrap();
            succeeds(
                Path::new("tar"),
                &["-xf", archive, "-C", &layout.display().to_string()],
                None,
            );
            built.insert(reference.to_string(), layout);
        }
    }
    built
}

/// The catalog's pod (OLM's, from the catalog image) is ready on the real node: its probes run
/// the gRPC health probe against `opm serve`.
async fn catalog_pod_serves(admin: &Client, namespace: &str) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pod = wait::until("the catalog's pod to be ready", Duration::from_secs(180), || {
        let pods = pods.clone();
        async move {
            let listed = pods
                .list(&ListParams::default().labels(&format!("olm.catalogSource={SOURCE}")))
                .await
                .map_err(|error| error.to_string())?;
            listed
                .items
                .into_iter()
                .find(real_node::pod_ready)
                .ok_or_else(|| "no ready catalog pod".to_string())
        }
    })
    .await;
    real_node::assert_on_real_node(&pod);
    let image = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.image.clone());
    assert_eq!(image, Some(format!("{CATALOG_IMAGE}:latest")));
}

/// A bundle unpack Job of `bundle` succeeded in the namespace: its `pull` container ran the
/// bundle image.
async fn bundle_unpacked(admin: &Client, namespace: &str, bundle: &str) {
    let jobs: Api<Job> = Api::namespaced(admin.clone(), namespace);
    let bundle = bundle.to_string();
    wait::until(
        &format!("an unpack Job of {bundle} to succeed"),
        Duration::from_secs(60),
        || {
            let jobs = jobs.clone();
            let bundle = bundle.clone();
            async move {
                let listed = jobs
                    .list(&ListParams::default())
                    .await
                    .map_err(|error| error.to_string())?;
                let unpacks: Vec<(Option<String>, i32)> = listed
                    .items
                    .iter()
                    .map(|job| {
                        let pulled = job
                            .spec
                            .as_ref()
                            .and_then(|spec| spec.template.spec.as_ref())
                            .and_then(|spec| spec.init_containers.as_ref())
                            .and_then(|containers| containers.iter().find(|c| c.name == "pull"))
                            .and_then(|container| container.image.clone());
                        let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
                        (pulled, succeeded)
                    })
                    .collect();
                if unpacks
                    .iter()
                    .any(|(pulled, succeeded)| pulled.as_deref() == Some(&bundle) && *succeeded > 0)
                {
                    Ok(())
                } else {
                    Err(format!("unpack Jobs (bundle, succeeded): {unpacks:?}"))
                }
            }
        },
    )
    .await;
}

/// The operator's Deployment (the CSV's) has a ready pod on the real node running `image`, and
/// `WATCH_NAMESPACES` comes from the OperatorGroup's target namespaces, which OLM wrote on it.
async fn operator_pod_runs(admin: &Client, namespace: &str, package: &str, image: &str) {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let image = image.to_string();
    let pod = wait::until(
        &format!("the operator's pod running {image}"),
        Duration::from_secs(240),
        || {
            let pods = pods.clone();
            let image = image.clone();
            async move {
                let listed = pods
                    .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={package}")))
                    .await
                    .map_err(|error| error.to_string())?;
                let running: Vec<String> = listed
                    .items
                    .iter()
                    .map(|pod| {
                        let container = pod.spec.as_ref().and_then(|spec| spec.containers.first());
                        format!(
                            "{} {:?} ready={}",
                            pod.metadata.name.clone().unwrap_or_default(),
                            container.and_then(|c| c.image.clone()),
                            real_node::pod_ready(pod)
                        )
                    })
                    .collect();
                listed
                    .items
                    .into_iter()
                    .find(|pod| {
                        real_node::pod_ready(pod)
                            && pod.metadata.deletion_timestamp.is_none()
                            && pod
                                .spec
                                .as_ref()
                                .and_then(|spec| spec.containers.first())
                                .and_then(|c| c.image.as_deref())
                                == Some(image.as_str())
                    })
                    .ok_or_else(|| format!("pods: {running:?}"))
            }
        },
    )
    .await;
    real_node::assert_on_real_node(&pod);
    let target = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get("olm.targetNamespaces"))
        .cloned();
    assert_eq!(
        target.as_deref(),
        Some(namespace),
        "OLM's target namespaces on the pod"
    );
    let env = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|container| container.env.clone())
        .unwrap_or_default();
    let watch = env
        .iter()
        .find(|variable| variable.name == "WATCH_NAMESPACES")
        .expect("WATCH_NAMESPACES");
    assert_eq!(
        watch
            .value_from
            .as_ref()
            .and_then(|from| from.field_ref.as_ref())
            .map(|field| field.field_path.as_str()),
        Some("metadata.annotations['olm.targetNamespaces']")
    );
}

/// The CSV's first example of the operator's cluster kind, created in the namespace, is
/// reconciled (its status observes its generation), then deleted and gone.
async fn reconciles_its_example(
    admin: &Client,
    namespace: &str,
    csv: &DynamicObject,
    operator: &OperatorPackage,
) {
    let kind = match operator.engine {
        "etcd" => "EtcdCluster",
        "mysql" => "MySQLCluster",
        "redis" => "RedisCluster",
        "mongodb" => "MongoDBReplicaSet",
        other => panic!("no cluster kind for {other}"),
    };
    let example = alm_example(csv, kind);
    let api_version = example["apiVersion"].as_str().expect("apiVersion");
    let (group, version) = api_version.split_once('/').expect("group/version");
    // The resource's plural is its CRD's.
    let plural = operator
        .crds
        .iter()
        .find(|crd| crd.spec.names.kind == kind)
        .map(|crd| crd.spec.names.plural.clone())
        .unwrap_or_else(|| panic!("{} owns no {kind}", operator.package));
    let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let clusters: Api<DynamicObject> = Api::namespaced_with(admin.clone(), namespace, &resource);
    let created = clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(example).expect("an object"),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the {kind} example: {error}"));
    let name = created.metadata.name.clone().expect("a name");
    wait::until(
        &format!("the operator to reconcile {kind} {name}"),
        Duration::from_secs(180),
        || {
            let clusters = clusters.clone();
            let name = name.clone();
            async move {
                let cluster = clusters.get(&name).await.map_err(|error| error.to_string())?;
                let observed = cluster.data["status"]["observedGeneration"].as_i64();
                if observed.is_some() && observed == cluster.metadata.generation {
                    Ok(())
                } else {
                    Err(format!("status: {}", cluster.data["status"]))
                }
            }
        },
    )
    .await;
    clusters.delete(&name, &DeleteParams::default()).await.unwrap();
    wait::until(
        &format!("{kind} {name} to be gone"),
        Duration::from_secs(180),
        || {
            let clusters = clusters.clone();
            let name = name.clone();
            async move {
                match clusters.get_opt(&name).await.map_err(|error| error.to_string())? {
                    None => Ok(()),
                    Some(cluster) => Err(format!("finalizers {:?}", cluster.metadata.finalizers)),
                }
            }
        },
    )
    .await;
}
