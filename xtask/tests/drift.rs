//! Committed generated files must equal what the generator produces from the Rust types now.

use serde::Deserialize;

#[test]
fn committed_generated_files_match_the_generator() {
    let root = xtask::repository_root();
    let drifted = xtask::drifted(&root).expect("generate");
    assert!(
        drifted.is_empty(),
        "these files differ from the generator's output (run `cargo xtask generate`): {drifted:?}"
    );
}

#[test]
fn drift_is_detected_when_a_committed_copy_changes() {
    let scratch = std::env::temp_dir().join(format!("quorum-drift-{}", std::process::id()));
    xtask::write_all(&scratch).expect("write into scratch");
    assert!(xtask::drifted(&scratch).unwrap().is_empty());

    let first = xtask::generated_files().unwrap().remove(0);
    let path = scratch.join(&first.path);
    std::fs::write(&path, first.contents.replace("etcd", "etc")).unwrap();
    assert_eq!(xtask::drifted(&scratch).unwrap(), vec![first.path]);
    std::fs::remove_dir_all(&scratch).unwrap();
}

#[test]
fn every_operator_has_its_chart_bundle_and_catalog_entry_generated() {
    let paths: Vec<String> = xtask::generated_files()
        .unwrap()
        .into_iter()
        .map(|file| file.path.display().to_string())
        .collect();
    let catalog = xtask::generated_files()
        .unwrap()
        .into_iter()
        .find(|file| file.path.ends_with("catalog/index.yaml"))
        .expect("the catalog")
        .contents;
    let catalog_packages: Vec<String> = serde_yaml::Deserializer::from_str(&catalog)
        .map(|document| serde_yaml::Value::deserialize(document).expect("a catalog document"))
        .filter(|document| document["schema"] == "olm.package")
        .filter_map(|document| document["name"].as_str().map(str::to_string))
        .collect();
    let packages: Vec<&str> = xtask::operators().iter().map(|o| o.package).collect();
    assert_eq!(
        packages,
        [
            "quorum-etcd-operator",
            "quorum-mysql-operator",
            "quorum-redis-operator",
            "quorum-mongodb-operator"
        ]
    );
    for package in packages {
        for expected in [
            format!("charts/{package}/Chart.yaml"),
            format!("charts/{package}/values.yaml"),
            format!("charts/{package}/values.schema.json"),
            format!("charts/{package}/templates/rbac.yaml"),
            format!("bundle/{package}/manifests/{package}.clusterserviceversion.yaml"),
            format!("bundle/{package}/metadata/annotations.yaml"),
            format!("bundle/{package}/bundle.Dockerfile"),
        ] {
            assert!(
                paths.contains(&expected),
                "{expected} is not generated: {paths:?}"
            );
        }
        assert!(
            catalog_packages.iter().any(|name| name == package),
            "{package} is not in the catalog"
        );
    }
}
