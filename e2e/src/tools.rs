//! Paths of the binaries `e2e/toolchain/build.sh` builds, at the versions the repository pins.

use std::path::PathBuf;

const VERSIONS: &str = include_str!("../toolchain/versions.env");

/// The pinned version of a tool, from `e2e/toolchain/versions.env` (e.g. `ETCD_VERSION`).
pub fn pinned_version(variable: &str) -> String {
    VERSIONS
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{variable}=")))
        .unwrap_or_else(|| panic!("{variable} is not pinned in e2e/toolchain/versions.env"))
        .trim()
        .to_string()
}

/// The cache root (`QUORUM_CACHE`, default `~/.cache/quorum`).
pub fn cache_root() -> PathBuf {
    std::env::var_os("QUORUM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quorum"))
}

/// The etcd server binary.
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/build.sh etcd` (the test command does).
pub fn etcd_binary() -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("etcd-{}", pinned_version("ETCD_VERSION")))
        .join("etcd");
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/build.sh etcd`",
        path.display()
    );
    path
}

/// `etcdutl`, etcd's offline tool (snapshot restore), built beside [`etcd_binary`].
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/build.sh etcd`.
pub fn etcdutl_binary() -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("etcd-{}", pinned_version("ETCD_VERSION")))
        .join("etcdutl");
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/build.sh etcd`",
        path.display()
    );
    path
}

/// The S3-compatible test server (`gofakes3`).
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/build.sh s3` (`e2e/setup.sh` does).
pub fn s3_server_binary() -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("gofakes3-{}", pinned_version("GOFAKES3_VERSION")))
        .join("gofakes3");
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/build.sh s3`",
        path.display()
    );
    path
}
