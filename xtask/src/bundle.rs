//! The OLM bundle of each operator (`bundle/<package>/`) and the file-based catalog that lists
//! them (`catalog/`). The ClusterServiceVersion is built here from the same description as the
//! chart: CRDs, RBAC rules, samples, images.

use std::path::Path;

use anyhow::Context;
use base64::Engine;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::{GeneratedFile, HEADER, OperatorPackage};

/// The bundle's version: the workspace's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Versions published before [`VERSION`], oldest first. Each release replaces the one before
/// it in the channels, so an installed operator upgrades along this list; on a version bump,
/// the version being left goes here.
pub const PUBLISHED: &[&str] = &[];

/// The channel new bundles are published to first, and the default one.
pub const CHANNELS: [&str; 2] = ["candidate", "stable"];

/// One version of a bundle and the upgrade edge into it. The CSV (`spec.replaces`, the
/// `olm.skipRange` annotation) and the catalog's channel entry are both written from this, so
/// the two cannot disagree about which versions upgrade to which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub version: String,
    /// The version this one replaces (the previous entry of the channel), if any.
    pub previous: Option<String>,
}

impl Release {
    /// The release the workspace builds now.
    pub fn current() -> Self {
        releases().pop().expect("the workspace's version is a release")
    }

    /// A release after this one, replacing it.
    pub fn followed_by(&self, version: &str) -> Self {
        Self {
            version: version.to_string(),
            previous: Some(self.version.clone()),
        }
    }

    /// The CSV name of this release of `package`: the bundle's name in the catalog.
    pub fn csv_name(&self, package: &str) -> String {
        csv_name(package, &self.version)
    }

    /// `spec.replaces` of the CSV and `replaces` of the channel entry.
    pub fn replaces(&self, package: &str) -> Option<String> {
        self.previous
            .as_deref()
            .map(|previous| csv_name(package, previous))
    }

    /// Every older version upgrades straight here (`olm.skipRange`), as well as along the
    /// `replaces` chain: a cluster that missed releases takes one upgrade, not one per release.
    pub fn skip_range(&self) -> String {
        format!("<{}", self.version)
    }
}

/// The name of `package`'s CSV at `version`.
pub fn csv_name(package: &str, version: &str) -> String {
    format!("{package}.v{version}")
}

/// Every release in the channels, oldest first: [`PUBLISHED`], then [`VERSION`].
pub fn releases() -> Vec<Release> {
    let mut releases: Vec<Release> = Vec::new();
    for version in PUBLISHED.iter().copied().chain([VERSION]) {
        releases.push(match releases.last() {
            Some(previous) => previous.followed_by(version),
            None => Release {
                version: version.to_string(),
                previous: None,
            },
        });
    }
    releases
}

/// The version after `version` with its patch number raised (`0.1.0` -> `0.1.1`).
pub fn next_patch(version: &str) -> anyhow::Result<String> {
    let mut parts: Vec<u64> = version
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|error| anyhow::anyhow!("{version} is not major.minor.patch: {error}"))?;
    anyhow::ensure!(parts.len() == 3, "{version} is not major.minor.patch");
    parts[2] += 1;
    Ok(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

/// The samples of owned kinds, as JSON objects, for `alm-examples`. `operator-sdk bundle
/// validate` (the operatorframework suite) warns about every provided API without an entry, so
/// each owned kind has a sample; documents of other kinds (a Secret a sample refers to) are
/// left out: OperatorHub offers only what the operator provides.
fn samples(operator: &OperatorPackage) -> anyhow::Result<Vec<Value>> {
    let owned: Vec<&str> = operator
        .crds
        .iter()
        .map(|crd| crd.spec.names.kind.as_str())
        .collect();
    let mut documents = Vec::new();
    for file in &operator.samples {
        for document in serde_yaml::Deserializer::from_str(file) {
            let value: Value = serde::Deserialize::deserialize(document)?;
            if value["kind"].as_str().is_some_and(|kind| owned.contains(&kind)) {
                documents.push(value);
            }
        }
    }
    Ok(documents)
}

fn owned_crd(operator: &OperatorPackage, crd: &CustomResourceDefinition) -> anyhow::Result<Value> {
    let names = &crd.spec.names;
    let version = &crd.spec.versions[0].name;
    let kind = names.kind.as_str();
    let descriptors = operator
        .descriptors
        .iter()
        .find(|descriptors| descriptors.kind == kind)
        .ok_or_else(|| anyhow::anyhow!("{}: no descriptors for {kind}", operator.package))?;
    Ok(json!({
        "name": crd.metadata.name,
        "version": version,
        "kind": kind,
        "displayName": kind,
        "description": crd.spec.versions[0].schema.as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| s.description.clone())
            .unwrap_or_default(),
        "resources": operator.child_kinds.iter()
            .map(|kind| json!({"kind": kind, "version": "v1", "name": ""}))
            .collect::<Vec<_>>(),
        "specDescriptors": descriptors.spec,
        "statusDescriptors": descriptors.status,
    }))
}

/// The ClusterServiceVersion.
pub fn cluster_service_version(operator: &OperatorPackage) -> anyhow::Result<Value> {
    cluster_service_version_of(operator, &Release::current())
}

/// The ClusterServiceVersion of `release`.
pub fn cluster_service_version_of(operator: &OperatorPackage, release: &Release) -> anyhow::Result<Value> {
    let image = crate::image::reference(operator, &release.version);
    let icon = base64::engine::general_purpose::STANDARD.encode(operator.icon_svg);
    let deployment = json!({
        "replicas": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": operator.package}},
        "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": operator.package}},
            "spec": {
                "serviceAccountName": operator.package,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "operator",
                    "image": image,
                    "args": ["--log-format=json", "--leader-elect=true", "--metrics-address=0.0.0.0:8080"],
                    "env": [
                        {"name": "WATCH_NAMESPACES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}}},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "OPERATOR_IMAGE", "value": image}
                    ],
                    "ports": [{"name": "metrics", "containerPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                        "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}
                    }
                }]
            }
        }
    });
    let mut related: Vec<Value> = vec![json!({"name": "operator", "image": image})];
    related.extend(
        operator
            .related_images
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image})),
    );
    let capabilities = crate::capability::proven_level(&crate::capability::proofs(operator.engine))
        .map(|level| level.annotation())
        .with_context(|| format!("no test proves even the basic install of {}", operator.package))?;
    let mut csv = json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": release.csv_name(operator.package),
            "annotations": {
                "olm.skipRange": release.skip_range(),
                "alm-examples": serde_json::to_string_pretty(&samples(operator)?)?,
                "capabilities": capabilities,
                "categories": "Database",
                "containerImage": image,
                "createdAt": "2026-11-21T00:00:00Z",
                "description": operator.description,
                "repository": "https://github.com/quorum-dev/quorum",
                "support": "Quorum developers",
                "operators.operatorframework.io/builder": "quorum-xtask",
                "features.operators.openshift.io/disconnected": "false",
                "features.operators.openshift.io/fips-compliant": "false",
                "features.operators.openshift.io/proxy-aware": "false",
                "features.operators.openshift.io/tls-profiles": "false",
                "features.operators.openshift.io/token-auth-aws": "false",
                "features.operators.openshift.io/token-auth-azure": "false",
                "features.operators.openshift.io/token-auth-gcp": "false"
            }
        },
        "spec": {
            "displayName": operator.display_name,
            "description": operator.long_description,
            "version": release.version,
            "maturity": "alpha",
            "minKubeVersion": "1.30.0",
            "keywords": operator.keywords,
            "maintainers": [{"name": "Quorum developers", "email": "dev@quorum.dev"}],
            "provider": {"name": "Quorum", "url": "https://github.com/quorum-dev/quorum"},
            "links": [
                {"name": "Source", "url": "https://github.com/quorum-dev/quorum"},
                {"name": "Documentation", "url": format!("https://github.com/quorum-dev/quorum/blob/main/docs/{}.md", operator.engine)}
            ],
            "icon": [{"base64data": icon, "mediatype": "image/svg+xml"}],
            "installModes": [
                {"type": "OwnNamespace", "supported": true},
                {"type": "SingleNamespace", "supported": true},
                {"type": "MultiNamespace", "supported": true},
                {"type": "AllNamespaces", "supported": true}
            ],
            "customresourcedefinitions": {"owned": operator.crds.iter()
                .map(|crd| owned_crd(operator, crd))
                .collect::<anyhow::Result<Vec<_>>>()?},
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": [{"name": operator.package, "label": {"app.kubernetes.io/name": operator.package}, "spec": deployment}],
                    "clusterPermissions": [{"serviceAccountName": operator.package, "rules": operator.rules}],
                    "permissions": [{"serviceAccountName": operator.package, "rules": operator.leader_election_rules}]
                }
            },
            "relatedImages": related
        }
    });
    if let Some(replaces) = release.replaces(operator.package) {
        csv["spec"]["replaces"] = replaces.into();
    }
    Ok(csv)
}

/// `bundle/<package>/`: manifests (CSV, CRDs), metadata and the bundle Dockerfile.
pub fn bundle_files(operator: &OperatorPackage) -> anyhow::Result<Vec<GeneratedFile>> {
    let root = Path::new("bundle").join(operator.package);
    Ok(bundle_files_of(operator, &Release::current())?
        .into_iter()
        .map(|file| GeneratedFile {
            path: root.join(file.path),
            contents: file.contents,
        })
        .collect())
}

/// The bundle directory of `release`, with paths relative to it.
pub fn bundle_files_of(operator: &OperatorPackage, release: &Release) -> anyhow::Result<Vec<GeneratedFile>> {
    let mut files = vec![GeneratedFile {
        path: format!("manifests/{}.clusterserviceversion.yaml", operator.package).into(),
        contents: crate::to_yaml(&cluster_service_version_of(operator, release)?)?,
    }];
    for crd in &operator.crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        files.push(GeneratedFile {
            path: format!("manifests/{name}.crd.yaml").into(),
            contents: crate::to_yaml(crd)?,
        });
    }
    let annotations = bundle_annotations(operator);
    files.push(GeneratedFile {
        path: "metadata/annotations.yaml".into(),
        contents: crate::to_yaml(&json!({ "annotations": annotations
            .iter()
            .map(|(key, value)| (key.to_string(), Value::String(value.clone())))
            .collect::<serde_json::Map<String, Value>>() }))?,
    });
    let labels: String = annotations
        .iter()
        .map(|(key, value)| format!("LABEL {key}={value}\n"))
        .collect();
    files.push(GeneratedFile {
        path: "bundle.Dockerfile".into(),
        contents: format!(
            "{HEADER}FROM scratch\n{labels}COPY manifests /manifests/\nCOPY metadata /metadata/\n"
        ),
    });
    Ok(files)
}

/// The bundle's annotations (`metadata/annotations.yaml`), which its image carries as labels.
pub fn bundle_annotations(operator: &OperatorPackage) -> Vec<(&'static str, String)> {
    [
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1".to_string(),
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/".into(),
        ),
        (
            "operators.operatorframework.io.bundle.package.v1",
            operator.package.into(),
        ),
        (
            "operators.operatorframework.io.bundle.channels.v1",
            CHANNELS.join(","),
        ),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            "stable".into(),
        ),
    ]
    .into()
}

/// The bundle image of `operator` at `version`, as the catalog names it.
pub fn bundle_image(operator: &OperatorPackage, version: &str) -> String {
    format!(
        "ghcr.io/quorum-dev/{}-bundle:{}",
        operator.binary,
        crate::image::tag(version)
    )
}

/// The catalog image, as the README's CatalogSource names it.
pub const CATALOG_IMAGE: &str = "ghcr.io/quorum-dev/catalog";

/// Writes the bundle directory of `release` into `directory`.
pub fn write_bundle(operator: &OperatorPackage, release: &Release, directory: &Path) -> anyhow::Result<()> {
    for file in bundle_files_of(operator, release)? {
        let path = directory.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &file.contents)?;
    }
    Ok(())
}

/// The package's `olm.package` and `olm.channel` documents: every channel lists `releases`
/// with the upgrade edges of each.
pub fn package_documents(operator: &OperatorPackage, releases: &[Release]) -> Vec<Value> {
    let mut documents = vec![json!({
        "schema": "olm.package",
        "name": operator.package,
        "defaultChannel": "stable",
        "description": operator.description,
        "icon": {"base64data": base64::engine::general_purpose::STANDARD.encode(operator.icon_svg), "mediatype": "image/svg+xml"}
    })];
    let entries: Vec<Value> = releases
        .iter()
        .map(|release| {
            let mut entry = json!({
                "name": release.csv_name(operator.package),
                "skipRange": release.skip_range(),
            });
            if let Some(replaces) = release.replaces(operator.package) {
                entry["replaces"] = replaces.into();
            }
            entry
        })
        .collect();
    for channel in CHANNELS {
        documents.push(json!({
            "schema": "olm.channel",
            "package": operator.package,
            "name": channel,
            "entries": entries,
        }));
    }
    documents
}

/// YAML documents as one file-based catalog file under the generated-file header.
pub fn catalog_text(documents: &[Value]) -> anyhow::Result<String> {
    // `---` only between documents: opm reads a leading `---` after the header comment as an
    // empty first document and refuses it ("object '' is missing root schema field").
    let mut text = String::from(HEADER);
    for (index, document) in documents.iter().enumerate() {
        if index > 0 {
            text.push_str("---\n");
        }
        text.push_str(&serde_yaml::to_string(document)?);
    }
    Ok(text)
}

/// The catalog's `olm.bundle` entries of `operator` at `releases`, each naming its bundle image.
pub fn bundle_documents(operator: &OperatorPackage, releases: &[Release]) -> Vec<Value> {
    releases
        .iter()
        .map(|release| {
            json!({
                "schema": "olm.bundle",
                "name": release.csv_name(operator.package),
                "package": operator.package,
                "image": bundle_image(operator, &release.version),
                "properties": [
                    {"type": "olm.package", "value": {"packageName": operator.package, "version": release.version}}
                ]
            })
        })
        .collect()
}

/// `catalog/index.yaml`: the file-based catalog with every package, its channels and bundles.
/// Bundles are referenced by image, as users with a registry consume them; the tests render an
/// inline catalog from the bundle directories instead.
pub fn catalog_file(operators: &[OperatorPackage]) -> anyhow::Result<GeneratedFile> {
    let releases = releases();
    let mut documents = Vec::new();
    for operator in operators {
        documents.extend(package_documents(operator, &releases));
        documents.extend(bundle_documents(operator, &releases));
    }
    Ok(GeneratedFile {
        path: Path::new("catalog/index.yaml").to_path_buf(),
        contents: catalog_text(&documents)?,
    })
}
