//! The operators' container images, built as OCI image layouts without a container engine or a
//! base image: a static binary (plus the tools the operator runs, if any), a passwd entry for
//! the non-root user, the system's CA bundle, assembled by `umoci` (daemonless, rootless).
//!
//! `cargo xtask image <operator> --layout <dir>` writes `<dir>` as an OCI layout tagged with the
//! version the bundle and chart name; any OCI tool copies it to a registry from there. The
//! image matches `operators/<engine>/Dockerfile`: same paths, user, entrypoint and labels.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, bail, ensure};

use crate::OperatorPackage;

/// The non-root user and group the operators run as (distroless' `nonroot`).
pub const USER: u32 = 65532;

/// The only target whose standard library links statically here (glibc 2.34 and later carry
/// the `files` and `dns` name-service modules inside libc, so a static binary resolves names
/// without loading NSS modules the image does not have).
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// Where the operators' own binaries go in the image.
const BIN: &str = "usr/local/bin";

/// The repository the images are built from (the workspace's `repository`).
const SOURCE: &str = "https://github.com/quorum-dev/quorum";

/// The image's repository, without a tag.
pub fn repository(operator: &OperatorPackage) -> String {
    format!("ghcr.io/quorum-dev/{}", operator.binary)
}

/// The tag images of `version` are published under.
pub fn tag(version: &str) -> String {
    format!("v{version}")
}

/// The image of `operator` at `version`, as the CSV, the chart and the operator itself name it.
pub fn reference(operator: &OperatorPackage, version: &str) -> String {
    format!("{}:{}", repository(operator), tag(version))
}

/// How the binary is compiled. Both strip symbols and debug information: an image carries
/// neither.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Optimized: what a published image holds.
    Release,
    /// Unoptimized and incremental: a warm rebuild after a change only recompiles the changed
    /// crates and relinks, which is what the tests build (the image's shape does not depend on
    /// optimization).
    Dev,
}

impl Profile {
    /// The cargo profile (defined on the command line, so the workspace's own profiles and
    /// their build outputs are untouched) and its settings.
    ///
    /// An optimized image is optimized for size as a whole (one code unit, link-time
    /// optimization, `opt-level = "s"`) and linked at a fixed address: an operator spends its
    /// time waiting on the network, and a smaller program resident is most of its memory. On
    /// the etcd bench (3 clusters, 2026-12-03) this took the binary from 30.6 to 17.3 MB and the
    /// operator's peak resident memory while converging from 22.1 to 16.0 MiB, at the same CPU.
    ///
    /// SHA-256 is the exception, optimized for speed: a backup Job hashes every byte it streams.
    /// Optimized for size, the compiler calls each SHA instruction's intrinsic as a function of
    /// its own instead of inlining it, and a 1 GiB etcd backup's Job spent about 13 CPU seconds,
    /// most of them there (a profile of the bench's Job, 2026-12-04).
    fn cargo_profile(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Self::Release => (
                "image-release",
                &[
                    "profile.image-release.inherits=\"release\"",
                    "profile.image-release.strip=true",
                    "profile.image-release.debug=false",
                    "profile.image-release.opt-level=\"s\"",
                    "profile.image-release.lto=\"fat\"",
                    "profile.image-release.codegen-units=1",
                    "profile.image-release.package.sha2.opt-level=3",
                ],
            ),
            Self::Dev => (
                "image-dev",
                &[
                    "profile.image-dev.inherits=\"dev\"",
                    "profile.image-dev.strip=true",
                    "profile.image-dev.debug=false",
                ],
            ),
        }
    }

    /// The compiler's flags: linked statically, and an optimized image at a fixed address (no
    /// position-independent code, so no relocations dirty its pages when it starts).
    fn rustflags(self) -> &'static str {
        match self {
            Self::Release => "-C target-feature=+crt-static -C relocation-model=static",
            Self::Dev => "-C target-feature=+crt-static",
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        match text {
            "release" => Ok(Self::Release),
            "dev" => Ok(Self::Dev),
            other => bail!("unknown profile {other:?}: release or dev"),
        }
    }
}

/// A file the image carries besides the operator's binary.
pub struct ImageFile {
    /// Path inside the image, relative to `/`.
    pub path: String,
    pub source: PathBuf,
    pub mode: u32,
}

/// The tools an operator runs from its own image. The etcd operator's restore init container
/// runs `etcdutl` (at the path `restore-member` defaults to), at the etcd release the bundle
/// names; the others speak their databases' protocols themselves.
fn tools(operator: &OperatorPackage) -> anyhow::Result<Vec<ImageFile>> {
    match operator.engine {
        "etcd" => {
            let version = pinned_version("ETCD_VERSION")?;
            ensure!(
                version == etcd_operator::packaging::DEFAULT_ETCD_IMAGE_TAG,
                "ETCD_VERSION ({version}) in e2e/toolchain/versions.env is not the etcd release the bundle names ({})",
                etcd_operator::packaging::DEFAULT_ETCD_IMAGE_TAG
            );
            let source = cache_root().join(format!("bin/etcd-{version}/etcdutl"));
            ensure!(
                source.exists(),
                "{} is missing: run `e2e/toolchain/build.sh etcd`",
                source.display()
            );
            Ok(vec![ImageFile {
                path: format!("{BIN}/etcdutl"),
                source,
                mode: 0o755,
            }])
        }
        _ => Ok(Vec::new()),
    }
}

/// The checkout an operator's binary is compiled from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// This workspace.
    Workspace,
    /// Another checkout of it (an earlier release's, say, for the operator upgrade test),
    /// compiled into a target directory of its own named after the checkout's directory:
    /// cargo tells two checkouts' crates apart by their paths inside the workspace and their
    /// files' times, so sharing one directory would take one's artifacts for the other's.
    Checkout(PathBuf),
}

/// What [`build`] made.
#[derive(Debug)]
pub struct BuiltImage {
    pub layout: PathBuf,
    pub tag: String,
    /// The static binary that went in.
    pub binary: PathBuf,
}

/// The environment of an operator's process: glibc's allocator set to hand back what the
/// operator frees. By default a thread that allocates while another holds the heap gets an
/// arena of its own (up to eight per core), each keeping what its threads freed; blocks of 128
/// KiB and more come from the heap too once one such block was freed; and the heap's top is
/// returned only past 128 KiB of free space, with 128 KiB of padding on each growth. One arena,
/// blocks of 16 KiB and more mapped on their own (and unmapped when freed: a list's response, a
/// connection's buffers), no padding and no trim threshold make a settled operator's resident
/// memory what it holds. Measured with the release etcd operator and five clusters: resident
/// anonymous memory per cluster 790 KiB by default, 700 with one arena, 640 with all four. An
/// operator's allocations are neither frequent nor contended enough for the system calls or
/// the one arena to show in its CPU time.
pub const OPERATOR_ENV: [(&str, &str); 4] = [
    ("MALLOC_ARENA_MAX", "1"),
    ("MALLOC_MMAP_THRESHOLD_", "16384"),
    ("MALLOC_TOP_PAD_", "0"),
    ("MALLOC_TRIM_THRESHOLD_", "0"),
];

/// Builds `operator`'s image into the OCI layout `layout` (replaced if it is one already),
/// tagged [`tag`] of the workspace's version.
pub fn build(
    operator: &OperatorPackage,
    layout: &Path,
    profile: Profile,
    source: &Source,
) -> anyhow::Result<BuiltImage> {
    let version = crate::bundle::VERSION;
    ensure_replaceable(layout)?;
    let binary = static_binary(operator, profile, source)?;
    let entrypoint = format!("/{BIN}/{}", operator.binary);
    let mut files = vec![ImageFile {
        path: entrypoint[1..].to_string(),
        source: binary.clone(),
        mode: 0o755,
    }];
    files.extend(tools(operator)?);
    for file in &files {
        ensure_static(&file.source)?;
    }
    let ca_bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    ensure!(
        ca_bundle.exists(),
        "{} is missing: install the system's CA certificates (Debian: ca-certificates)",
        ca_bundle.display()
    );

    files.push(ImageFile {
        path: "etc/ssl/certs/ca-certificates.crt".into(),
        source: ca_bundle.to_path_buf(),
        mode: 0o644,
    });
    let tag = tag(version);
    let labels = [
        (
            "org.opencontainers.image.title",
            operator.display_name.to_string(),
        ),
        (
            "org.opencontainers.image.description",
            operator.description.to_string(),
        ),
        ("org.opencontainers.image.version", version.to_string()),
        ("org.opencontainers.image.source", SOURCE.to_string()),
        (
            "org.opencontainers.image.licenses",
            env!("CARGO_PKG_LICENSE").to_string(),
        ),
    ];
    assemble(
        layout,
        &tag,
        &Contents {
            files,
            texts: users(),
            directories: vec![("tmp".into(), 0o1777)],
        },
        &ImageConfig {
            user: Some(format!("{USER}:{USER}")),
            entrypoint: vec![entrypoint],
            cmd: Vec::new(),
            path: "/usr/local/bin:/usr/bin:/bin",
            env: OPERATOR_ENV.to_vec(),
            labels: labels.map(|(key, value)| (key.to_string(), value)).to_vec(),
            created_by: format!("cargo xtask image {}", operator.engine),
        },
    )?;
    Ok(BuiltImage {
        layout: layout.to_path_buf(),
        tag,
        binary,
    })
}

/// What an image holds: files copied from this machine, files written from text (path inside
/// the image, contents, mode) and directories (path, mode).
pub struct Contents {
    pub files: Vec<ImageFile>,
    pub texts: Vec<(String, String, u32)>,
    pub directories: Vec<(String, u32)>,
}

/// An image's configuration.
pub struct ImageConfig {
    pub user: Option<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// The search path (`PATH`).
    pub path: &'static str,
    /// Further environment variables.
    pub env: Vec<(&'static str, &'static str)>,
    pub labels: Vec<(String, String)>,
    /// The history entry of its one layer.
    pub created_by: String,
}

/// `/etc/passwd` and `/etc/group` with root and the non-root user [`USER`].
fn users() -> Vec<(String, String, u32)> {
    vec![
        (
            "etc/passwd".into(),
            format!(
                "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER}:{USER}:nonroot:/nonexistent:/sbin/nologin\n"
            ),
            0o644,
        ),
        (
            "etc/group".into(),
            format!("root:x:0:\nnonroot:x:{USER}:\n"),
            0o644,
        ),
    ]
}

/// Writes a one-layer image of `contents` with `config` into the OCI layout `layout` (replaced
/// if it is one already), tagged `tag`.
pub fn assemble(layout: &Path, tag: &str, contents: &Contents, config: &ImageConfig) -> anyhow::Result<()> {
    ensure_replaceable(layout)?;
    let scratch = layout.with_extension("building");
    remove_layout(layout)?;
    remove_dir(&scratch)?;
    std::fs::create_dir_all(&scratch)?;
    let image = format!("{}:{tag}", layout.display());
    umoci(&["init", "--layout", &layout.display().to_string()])?;
    umoci(&["new", "--image", &image])?;
    let bundle = scratch.join("bundle");
    umoci(&[
        "unpack",
        "--rootless",
        "--image",
        &image,
        &bundle.display().to_string(),
    ])?;
    let rootfs = bundle.join("rootfs");
    for file in &contents.files {
        copy(&file.source, &rootfs.join(&file.path), file.mode)?;
    }
    for (path, text, mode) in &contents.texts {
        write(&rootfs.join(path), text, *mode)?;
    }
    for (path, mode) in &contents.directories {
        make_dir(&rootfs.join(path), *mode)?;
    }
    umoci(&[
        "repack",
        "--image",
        &image,
        "--history.created_by",
        &config.created_by,
        &bundle.display().to_string(),
    ])?;
    let mut arguments: Vec<String> = vec!["config".into(), "--image".into(), image.clone()];
    if let Some(user) = &config.user {
        arguments.extend(["--config.user".into(), user.clone()]);
    }
    for part in &config.entrypoint {
        arguments.extend(["--config.entrypoint".into(), part.clone()]);
    }
    for part in &config.cmd {
        arguments.extend(["--config.cmd".into(), part.clone()]);
    }
    for (name, value) in &config.env {
        arguments.extend(["--config.env".into(), format!("{name}={value}")]);
    }
    arguments.extend([
        "--config.env".into(),
        format!("PATH={}", config.path),
        "--config.workingdir".into(),
        "/".into(),
        "--os".into(),
        "linux".into(),
        "--architecture".into(),
        "amd64".into(),
        "--history.created_by".into(),
        config.created_by.clone(),
    ]);
    for (key, value) in &config.labels {
        arguments.extend(["--config.label".into(), format!("{key}={value}")]);
    }
    umoci(&arguments.iter().map(String::as_str).collect::<Vec<_>>())?;
    // `repack` and `config` leave the blobs they superseded behind.
    umoci(&["gc", "--layout", &layout.display().to_string()])?;
    remove_dir(&scratch)
}

/// The bundle image of `operator` at `release` (what `bundle/<package>/bundle.Dockerfile`
/// builds: its manifests and metadata, its annotations as labels, nothing else), into the OCI
/// layout `layout`, tagged `v<version>`. Returns the tag.
pub fn build_bundle_image(
    operator: &OperatorPackage,
    release: &crate::bundle::Release,
    layout: &Path,
) -> anyhow::Result<String> {
    let texts = crate::bundle::bundle_files_of(operator, release)?
        .into_iter()
        .filter(|file| file.path.starts_with("manifests") || file.path.starts_with("metadata"))
        .map(|file| (file.path.display().to_string(), file.contents, 0o644))
        .collect();
    let labels = crate::bundle::bundle_annotations(operator)
        .into_iter()
        .map(|(key, value)| (key.to_string(), value))
        .collect();
    let tag = tag(&release.version);
    assemble(
        layout,
        &tag,
        &Contents {
            files: Vec::new(),
            texts,
            directories: Vec::new(),
        },
        &ImageConfig {
            user: None,
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            path: "/",
            env: Vec::new(),
            labels,
            created_by: format!("cargo xtask bundle-image {}", operator.engine),
        },
    )?;
    Ok(tag)
}

/// Where the catalog image keeps its file-based catalog.
const CATALOG_CONFIGS: &str = "configs";

/// The catalog image: `opm serve` of the file-based catalog `index` (the text of
/// `catalog/index.yaml`, or a catalog of other releases), with the gRPC health probe OLM's
/// catalog pods run by name (what `catalog/catalog.Dockerfile` builds from the opm image), into
/// the OCI layout `layout`, tagged `tag`. opm and the probe are the ones
/// `e2e/toolchain/packaging.sh` builds.
pub fn build_catalog_image(index: &str, layout: &Path, tag: &str) -> anyhow::Result<()> {
    let opm = cache_root().join(format!("bin/opm-{}/opm", pinned_version("OPM_VERSION")?));
    let probe = cache_root().join(format!(
        "bin/grpc-health-probe-{}/grpc-health-probe",
        pinned_version("GRPC_HEALTH_PROBE_VERSION")?
    ));
    for (tool, name) in [(&opm, "opm"), (&probe, "grpc-health-probe")] {
        ensure!(
            tool.exists(),
            "{} is missing: run `e2e/toolchain/packaging.sh {name}`",
            tool.display()
        );
        // The probe's `--help` fails (it wants an address): linked statically is what matters.
        ensure_linked_statically(tool)?;
    }
    let mut texts = users();
    texts.push((
        format!("{CATALOG_CONFIGS}/quorum/index.yaml"),
        index.to_string(),
        0o644,
    ));
    // opm writes one when there is none, which its non-root user cannot.
    texts.push(("etc/nsswitch.conf".into(), "hosts: files dns\n".into(), 0o644));
    assemble(
        layout,
        tag,
        &Contents {
            files: vec![
                ImageFile {
                    path: "bin/opm".into(),
                    source: opm,
                    mode: 0o755,
                },
                ImageFile {
                    path: "bin/grpc_health_probe".into(),
                    source: probe,
                    mode: 0o755,
                },
            ],
            texts,
            directories: vec![("tmp".into(), 0o1777)],
        },
        &ImageConfig {
            user: Some(format!("{USER}:{USER}")),
            entrypoint: vec!["/bin/opm".into()],
            // No `--cache-dir`: opm would refuse a cache it did not find (its integrity check),
            // and building one here would need opm to run on the image's paths. Without it,
            // opm builds its cache at start, a moment for a catalog this size.
            cmd: vec!["serve".into(), format!("/{CATALOG_CONFIGS}")],
            path: "/bin",
            env: Vec::new(),
            labels: vec![(
                "operators.operatorframework.io.index.configs.v1".into(),
                format!("/{CATALOG_CONFIGS}"),
            )],
            created_by: "cargo xtask catalog-image".into(),
        },
    )
}

/// Compiles the operator's binary statically, into its own target directory under the cache
/// (the static flag and the profiles must not invalidate the workspace's usual builds), and
/// returns its path. Cargo's fingerprints make a run after no change a no-op and a run after a
/// change a rebuild of the changed crates.
///
/// A checkout of another commit (an earlier release) builds into the same directory: its
/// dependencies are nearly all the workspace's own, already compiled there, so only its own
/// crates compile. Its binary is linked to the same path as the workspace's: the caller copies
/// it before the next build.
pub fn static_binary(
    operator: &OperatorPackage,
    profile: Profile,
    source: &Source,
) -> anyhow::Result<PathBuf> {
    let (name, settings) = profile.cargo_profile();
    let checkout = match source {
        Source::Workspace => crate::repository_root(),
        Source::Checkout(checkout) => checkout.clone(),
    };
    let target_dir = cache_root().join("static-target");
    ensure!(
        checkout.join("Cargo.toml").exists(),
        "{} is not a checkout of the workspace",
        checkout.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&checkout)
        .args([
            "build",
            "--quiet",
            "-p",
            operator.binary,
            "--bin",
            operator.binary,
        ])
        .args(["--target", TARGET, "--profile", name]);
    for setting in settings {
        command.args(["--config", setting]);
    }
    // RUSTFLAGS from the caller's environment would both override the static flag and change
    // every fingerprint of this target directory: exactly this and nothing else. With
    // `--target`, build scripts and proc macros are built for the host without it.
    command
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", profile.rustflags())
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS");
    let status = command
        .status()
        .context("running cargo to build the static binary")?;
    ensure!(
        status.success(),
        "cargo build of {} failed: {status}",
        operator.binary
    );
    Ok(target_dir.join(TARGET).join(name).join(operator.binary))
}

/// Fails unless `path` is an ELF executable with no program interpreter (nothing for the
/// kernel to load but the file itself).
pub fn ensure_linked_statically(path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(
        bytes.starts_with(b"\x7fELF") && bytes.get(4) == Some(&2) && bytes.get(5) == Some(&1),
        "{} is not a 64-bit little-endian ELF file",
        path.display()
    );
    let field = |offset: usize, width: usize| -> anyhow::Result<u64> {
        let slice = bytes
            .get(offset..offset + width)
            .with_context(|| format!("{} is truncated", path.display()))?;
        let mut buffer = [0u8; 8];
        buffer[..width].copy_from_slice(slice);
        Ok(u64::from_le_bytes(buffer))
    };
    let table = usize::try_from(field(0x20, 8)?)?;
    let entry_size = usize::try_from(field(0x36, 2)?)?;
    let entries = usize::try_from(field(0x38, 2)?)?;
    const PT_INTERP: u64 = 3;
    for index in 0..entries {
        if field(table + index * entry_size, 4)? == PT_INTERP {
            bail!(
                "{} is dynamically linked (it names a program interpreter)",
                path.display()
            );
        }
    }
    Ok(())
}

/// [`ensure_linked_statically`], and it runs `--help` here.
pub fn ensure_static(path: &Path) -> anyhow::Result<()> {
    ensure_linked_statically(path)?;
    let output = Command::new(path)
        .arg("--help")
        .output()
        .with_context(|| format!("running {} --help", path.display()))?;
    ensure!(
        output.status.success(),
        "{} --help failed: {}{}",
        path.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

fn umoci(args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("umoci")
        .args(args)
        .output()
        .map_err(|error| anyhow::anyhow!("running umoci: {error} (install it: Debian's `umoci` package)"))?;
    ensure!(
        output.status.success(),
        "umoci {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Refuses a `layout` that exists and is neither an OCI layout nor an empty directory, so a
/// mistyped `--layout` never deletes someone's files.
fn ensure_replaceable(layout: &Path) -> anyhow::Result<()> {
    if !layout.exists() {
        return Ok(());
    }
    let empty = layout.read_dir()?.next().is_none();
    ensure!(
        empty || layout.join("oci-layout").is_file(),
        "{} exists and is not an OCI layout: choose another --layout",
        layout.display()
    );
    Ok(())
}

fn remove_layout(layout: &Path) -> anyhow::Result<()> {
    ensure_replaceable(layout)?;
    remove_dir(layout)
}

fn remove_dir(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

fn make_dir(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    set_mode(path, mode)
}

fn copy(source: &Path, destination: &Path, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = destination.parent() {
        make_dir(parent, 0o755)?;
    }
    std::fs::copy(source, destination)
        .with_context(|| format!("copying {} to {}", source.display(), destination.display()))?;
    set_mode(destination, mode)
}

fn write(destination: &Path, contents: &str, mode: u32) -> anyhow::Result<()> {
    if let Some(parent) = destination.parent() {
        make_dir(parent, 0o755)?;
    }
    std::fs::write(destination, contents).with_context(|| format!("writing {}", destination.display()))?;
    set_mode(destination, mode)
}

/// The cache root (`QUORUM_CACHE`, default `~/.cache/quorum`), as the toolchain scripts use it.
pub fn cache_root() -> PathBuf {
    std::env::var_os("QUORUM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quorum"))
}

/// A version pinned in `e2e/toolchain/versions.env`.
fn pinned_version(variable: &str) -> anyhow::Result<String> {
    include_str!("../../e2e/toolchain/versions.env")
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{variable}=")))
        .map(|value| value.trim().to_string())
        .with_context(|| format!("{variable} is not pinned in e2e/toolchain/versions.env"))
}

#[cfg(test)]
mod tests {
    use super::Profile;

    /// A backup Job hashes every byte it streams with SHA-256: whatever else an image is
    /// optimized for, sha2 is optimized for speed (the dev profile an image-dev inherits sets it
    /// in the workspace's Cargo.toml).
    #[test]
    fn every_image_profile_optimizes_sha2_for_speed() {
        let (name, settings) = Profile::Release.cargo_profile();
        assert!(
            settings.contains(&format!("profile.{name}.package.sha2.opt-level=3").as_str()),
            "{settings:?}"
        );
        let (name, settings) = Profile::Dev.cargo_profile();
        assert!(settings.contains(&format!("profile.{name}.inherits=\"dev\"").as_str()));
        let manifest = std::fs::read_to_string(crate::repository_root().join("Cargo.toml"))
            .expect("the workspace's Cargo.toml");
        assert!(
            manifest.contains("[profile.dev.package.sha2]\nopt-level = 3\n"),
            "the workspace's dev profile optimizes sha2"
        );
    }
}
