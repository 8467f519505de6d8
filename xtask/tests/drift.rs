//! Committed generated files must equal what the generator produces from the Rust types now.

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
