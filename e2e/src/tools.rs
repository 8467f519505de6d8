//! Paths of the binaries `e2e/toolchain/build.sh` builds, at the versions the repository pins.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

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

/// The repository the previous release's MySQL operator image is imported under (its tag is
/// the chart's default): `e2e/images.sh import previous`.
pub const PREVIOUS_RELEASE_MYSQL_IMAGE: &str = "localhost/quorum-e2e/previous-mysql-operator";

/// The checkout of the release the operator upgrade test starts from (`PREVIOUS_RELEASE_COMMIT`
/// in `e2e/toolchain/versions.env`), extracted by `e2e/images.sh`: its charts.
///
/// # Panics
/// When it has not been extracted: run `e2e/images.sh import previous` (the test command does).
pub fn previous_release() -> PathBuf {
    let checkout = cache_root()
        .join("build")
        .join(format!("previous-{}", pinned_version("PREVIOUS_RELEASE_COMMIT")));
    assert!(
        checkout.join(".extracted").exists(),
        "{} is missing: run `e2e/images.sh import previous`",
        checkout.display()
    );
    checkout
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

/// The etcd server binary at the version pinned as `version_variable` in
/// `e2e/toolchain/versions.env`, e.g. `etcd_binary_for("ETCD_PREVIOUS_VERSION")` for the
/// release a rolling upgrade starts from.
///
/// # Panics
/// When that version is not pinned, or has not been built: run `e2e/toolchain/build.sh etcd`
/// (for `ETCD_VERSION`) or `e2e/toolchain/build.sh etcd-previous` (for `ETCD_PREVIOUS_VERSION`).
pub fn etcd_binary_for(version_variable: &str) -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("etcd-{}", pinned_version(version_variable)))
        .join("etcd");
    let target = match version_variable {
        "ETCD_PREVIOUS_VERSION" => "etcd-previous",
        _ => "etcd",
    };
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/build.sh {target}`",
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

/// The variable in `e2e/toolchain/versions.env` that pins a packaging tool.
fn packaging_version_variable(tool: &str) -> &'static str {
    match tool {
        "helm" => "HELM_VERSION",
        "opm" => "OPM_VERSION",
        "operator-sdk" => "OPERATOR_SDK_VERSION",
        "promtool" => "PROMETHEUS_VERSION",
        other => panic!("{other} is not a packaging tool (helm, opm, operator-sdk, promtool)"),
    }
}

/// A packaging tool (`helm`, `opm`, `operator-sdk` or `promtool`) at the version `e2e/toolchain/versions.env`
/// pins, as `e2e/toolchain/packaging.sh` builds it.
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/packaging.sh <tool>`.
pub fn packaging_tool(tool: &str) -> PathBuf {
    let version = pinned_version(packaging_version_variable(tool));
    let path = cache_root()
        .join("bin")
        .join(format!("{tool}-{version}"))
        .join(tool);
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/packaging.sh {tool}`",
        path.display()
    );
    path
}

/// `kubectl`, built beside the control plane at the pinned `K8S_VERSION`.
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/build.sh k8s`.
pub fn kubectl_binary() -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("k8s-{}", pinned_version("K8S_VERSION")))
        .join("kubectl");
    assert!(
        path.exists(),
        "{} is missing: run `e2e/toolchain/build.sh k8s`",
        path.display()
    );
    path
}

/// The repository root: every path the tools get is relative to it, as a user would type them.
/// Found from the package cargo runs the test in, not from where this crate was compiled: two
/// checkouts sharing one build cache can otherwise hand one the other's compiled-in path.
pub fn repository_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_dir().expect("a working directory"));
    start
        .ancestors()
        .find(|directory| {
            std::fs::read_to_string(directory.join("Cargo.toml"))
                .is_ok_and(|manifest| manifest.contains("[workspace]"))
        })
        .unwrap_or_else(|| panic!("{} is not inside the Quorum workspace", start.display()))
        .to_path_buf()
}

/// Everything a finished tool said, for failure messages.
pub fn transcript(command: &str, output: &Output) -> String {
    format!(
        "`{command}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs `program args…` in the repository root, feeding it `stdin`, and returns what it did.
pub fn run_tool(program: &Path, args: &[&str], stdin: Option<&[u8]>) -> (String, Output) {
    let command = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .current_dir(repository_root())
        // The tools cache and write their state under HOME; keep that out of the user's.
        .env("HELM_CACHE_HOME", std::env::temp_dir().join("quorum-helm/cache"))
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("quorum-helm/config"),
        )
        .env("HELM_DATA_HOME", std::env::temp_dir().join("quorum-helm/data"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot run `{command}`: {error}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input)
            .unwrap_or_else(|error| panic!("writing to `{command}`: {error}"));
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("waiting for `{command}`: {error}"));
    (command, output)
}

/// Runs a tool that must succeed; returns its stdout and stderr.
pub fn succeeds(program: &Path, args: &[&str], stdin: Option<&[u8]>) -> (String, String) {
    let (command, output) = run_tool(program, args, stdin);
    assert!(output.status.success(), "{}", transcript(&command, &output));
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The directory `e2e/toolchain/packaging.sh olm` builds OLM into, at the pinned `OLM_VERSION`:
/// the `olm` and `catalog` operators and, under `crds/`, the CRDs of the
/// `github.com/operator-framework/api` version that OLM release requires.
///
/// # Panics
/// When it has not been built: run `e2e/toolchain/packaging.sh olm`.
pub fn olm_directory() -> PathBuf {
    let path = cache_root()
        .join("bin")
        .join(format!("olm-{}", pinned_version("OLM_VERSION")));
    for needed in ["olm", "catalog", "crds"] {
        assert!(
            path.join(needed).exists(),
            "{} is missing: run `e2e/toolchain/packaging.sh olm`",
            path.join(needed).display()
        );
    }
    path
}
