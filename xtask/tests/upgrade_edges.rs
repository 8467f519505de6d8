//! The upgrade edges a bundle's CSV declares (`spec.replaces`, `olm.skipRange`) are the ones
//! the catalog's channels list for it, for the committed release and for a next one.

use serde_json::{Value, json};
use xtask::bundle::{CHANNELS, Release, cluster_service_version_of, next_patch, package_documents, releases};

/// The entry of `csv` in every channel of the package's catalog documents.
fn entries<'a>(documents: &'a [Value], csv: &str) -> Vec<&'a Value> {
    let entries: Vec<&Value> = documents
        .iter()
        .filter(|document| document["schema"] == "olm.channel")
        .filter_map(|channel| {
            channel["entries"]
                .as_array()?
                .iter()
                .find(|entry| entry["name"] == csv)
        })
        .collect();
    assert_eq!(
        entries.len(),
        CHANNELS.len(),
        "{csv} in every channel: {documents:#?}"
    );
    entries
}

#[test]
fn every_csv_declares_the_upgrade_edges_its_channel_entries_list() {
    let current = Release::current();
    let next = current.followed_by(&next_patch(&current.version).unwrap());
    let chain = [current.clone(), next.clone()];
    for operator in xtask::operators() {
        let documents = package_documents(&operator, &chain);
        for release in &chain {
            let csv = cluster_service_version_of(&operator, release).unwrap();
            let name = csv["metadata"]["name"].as_str().unwrap();
            assert_eq!(name, release.csv_name(operator.package));
            assert_eq!(csv["spec"]["version"], json!(release.version));
            for entry in entries(&documents, name) {
                assert_eq!(
                    csv["spec"]["replaces"], entry["replaces"],
                    "{name}: the CSV's replaces is its channel entry's"
                );
                assert_eq!(
                    csv["metadata"]["annotations"]["olm.skipRange"], entry["skipRange"],
                    "{name}: the CSV's olm.skipRange is its channel entry's"
                );
            }
        }
        let next_csv = cluster_service_version_of(&operator, &next).unwrap();
        assert_eq!(
            next_csv["spec"]["replaces"],
            json!(current.csv_name(operator.package))
        );
        assert_eq!(
            next_csv["metadata"]["annotations"]["olm.skipRange"],
            json!(format!("<{}", next.version))
        );
    }
}

#[test]
fn the_releases_form_one_chain_ending_at_the_workspace_version() {
    let releases = releases();
    assert_eq!(releases.last(), Some(&Release::current()));
    assert_eq!(Release::current().version, xtask::bundle::VERSION);
    assert_eq!(releases[0].previous, None, "the first release replaces nothing");
    for pair in releases.windows(2) {
        assert_eq!(pair[1].previous.as_deref(), Some(pair[0].version.as_str()));
    }
    assert_eq!(next_patch("0.1.0").unwrap(), "0.1.1");
    assert_eq!(next_patch("1.9.19").unwrap(), "1.9.20");
    assert!(next_patch("1.2").is_err());
}
