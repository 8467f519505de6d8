//! Every operator's image, built by `cargo xtask image` as an OCI layout (a static binary,
//! `umoci`, no container engine, no base image), read back as a registry would read it:
//! `index.json` -> manifest -> config and layers, every blob checked against its digest. The
//! image runs as the non-root user with the binary as its entrypoint, carries the OCI labels,
//! holds a static binary that runs here, is small, and is the image the CSV, the chart and
//! the operator itself name.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Instant,
};

use serde_json::{Value, json};
use xtask::{OperatorPackage, bundle::VERSION, image};

/// Compressed size (all blobs) above which an image is a regression: the unoptimized binaries
/// the tests build are the biggest an image gets.
const MAX_IMAGE_BYTES: u64 = 48 << 20;

fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("running {program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {}: {}\n{}{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// SHA-256 of the file, as `sha256:<hex>`.
fn digest_of(path: &Path) -> String {
    let output = run("sha256sum", &[&path.display().to_string()]);
    format!(
        "sha256:{}",
        stdout(&output).split_whitespace().next().expect("a digest")
    )
}

/// The blob a descriptor points to, checked against the descriptor's digest and size.
fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().expect("a digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let path = layout.join("blobs/sha256").join(hex);
    assert_eq!(digest_of(&path), digest, "blob {digest} holds what its name says");
    assert_eq!(
        std::fs::metadata(&path).expect("the blob").len(),
        descriptor["size"].as_u64().expect("a size"),
        "blob {digest} has its descriptor's size"
    );
    path
}

fn json_blob(layout: &Path, descriptor: &Value) -> Value {
    serde_json::from_slice(&std::fs::read(blob(layout, descriptor)).unwrap()).expect("a JSON blob")
}

/// The image's name as the committed CSV and chart give it, each place it appears.
fn names_in_packaging(operator: &OperatorPackage) -> Vec<(&'static str, String)> {
    let root = xtask::repository_root();
    let csv: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join(format!(
            "bundle/{0}/manifests/{0}.clusterserviceversion.yaml",
            operator.package
        )))
        .expect("the committed CSV"),
    )
    .expect("the CSV is YAML");
    let values: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join(format!("charts/{}/values.yaml", operator.package)))
            .expect("the committed chart values"),
    )
    .expect("values.yaml is YAML");
    let container =
        &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0];
    let related = csv["spec"]["relatedImages"]
        .as_array()
        .expect("relatedImages")
        .iter()
        .find(|image| image["name"] == "operator")
        .expect("the operator among relatedImages");
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    vec![
        ("CSV relatedImages", text(&related["image"])),
        (
            "CSV containerImage",
            text(&csv["metadata"]["annotations"]["containerImage"]),
        ),
        ("CSV Deployment", text(&container["image"])),
        (
            "CSV OPERATOR_IMAGE",
            container["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|env| env["name"] == "OPERATOR_IMAGE")
                .map(|env| text(&env["value"]))
                .unwrap_or_default(),
        ),
        (
            "chart values",
            format!(
                "{}:{}",
                text(&values["image"]["repository"]),
                text(&values["image"]["tag"])
            ),
        ),
    ]
}

/// Builds and checks one operator's image; returns its compressed size.
fn check_image(operator: &OperatorPackage, scratch: &Path) -> u64 {
    let layout = scratch.join(operator.binary);
    let tag = image::tag(VERSION);
    let started = Instant::now();
    let built = run(
        env!("CARGO_BIN_EXE_xtask"),
        &[
            "image",
            operator.engine,
            "--layout",
            &layout.display().to_string(),
            "--profile",
            "dev",
        ],
    );
    let elapsed = started.elapsed();
    assert_eq!(
        stdout(&built).trim(),
        format!("{}:{tag}", layout.display()),
        "xtask image prints the image it made"
    );

    // The layout, as `skopeo copy oci:<layout>:<tag>` reads it.
    let oci_layout: Value =
        serde_json::from_slice(&std::fs::read(layout.join("oci-layout")).unwrap()).expect("oci-layout");
    assert_eq!(oci_layout["imageLayoutVersion"], "1.0.0");
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).expect("index.json");
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "one image in the layout: {index}");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        json!(tag)
    );
    assert_eq!(
        manifests[0]["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let manifest = json_blob(&layout, &manifests[0]);
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = json_blob(&layout, &manifest["config"]);
    let entrypoint = format!("/usr/local/bin/{}", operator.binary);
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(
        config["config"]["User"], "65532:65532",
        "runs as the non-root user"
    );
    assert_eq!(config["config"]["Entrypoint"], json!([entrypoint]));
    let environment = config["config"]["Env"].as_array().cloned().unwrap_or_default();
    for (name, value) in image::OPERATOR_ENV {
        assert!(
            environment.contains(&json!(format!("{name}={value}"))),
            "the operator's environment sets {name}: {environment:?}"
        );
    }
    let labels = &config["config"]["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.title"],
        json!(operator.display_name)
    );
    assert_eq!(labels["org.opencontainers.image.version"], json!(VERSION));
    assert_eq!(
        labels["org.opencontainers.image.source"],
        "https://github.com/quorum-dev/quorum"
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");

    // The layers: gzipped tars whose uncompressed digests are the config's diff_ids.
    let layers = manifest["layers"].as_array().expect("layers");
    let diff_ids = config["rootfs"]["diff_ids"].as_array().expect("diff_ids");
    assert_eq!(layers.len(), diff_ids.len());
    let mut listing = String::new();
    let unpacked = scratch.join(format!("{}-rootfs", operator.binary));
    std::fs::create_dir_all(&unpacked).unwrap();
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
        let path = blob(&layout, layer).display().to_string();
        let uncompressed = scratch.join("layer.tar");
        let tar = run("gzip", &["-dc", &path]);
        std::fs::write(&uncompressed, &tar.stdout).unwrap();
        assert_eq!(&json!(digest_of(&uncompressed)), diff_id);
        listing.push_str(&stdout(&run(
            "tar",
            &["-tvf", &uncompressed.display().to_string()],
        )));
        run(
            "tar",
            &[
                "-xf",
                &uncompressed.display().to_string(),
                "-C",
                &unpacked.display().to_string(),
            ],
        );
    }
    let mode_of = |path: &str| -> String {
        listing
            .lines()
            .find(|line| line.trim_end_matches('/').ends_with(&format!(" {path}")))
            .and_then(|line| line.split_whitespace().next())
            .unwrap_or_else(|| panic!("{path} is not in the image:\n{listing}"))
            .to_string()
    };
    let mut expected = vec![
        (entrypoint[1..].to_string(), "-rwxr-xr-x"),
        ("etc/passwd".to_string(), "-rw-r--r--"),
        ("etc/group".to_string(), "-rw-r--r--"),
        ("etc/ssl/certs/ca-certificates.crt".to_string(), "-rw-r--r--"),
        ("tmp".to_string(), "drwxrwxrwt"),
    ];
    if operator.engine == "etcd" {
        // The restore init container runs it from the operator's image.
        expected.push(("usr/local/bin/etcdutl".to_string(), "-rwxr-xr-x"));
    }
    for (path, mode) in expected {
        assert_eq!(mode_of(&path), mode, "{path}:\n{listing}");
    }
    let passwd = std::fs::read_to_string(unpacked.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");

    // The binary as the image holds it: static, and it runs with nothing else around it.
    let binary = unpacked.join(&entrypoint[1..]).display().to_string();
    let file = stdout(&run("file", &[&binary]));
    assert!(
        file.contains("statically linked") || file.contains("static-pie linked"),
        "{file}"
    );
    let ldd = Command::new("ldd").arg(&binary).output().expect("ldd");
    let ldd = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    assert!(
        ldd.contains("statically linked") || ldd.contains("not a dynamic executable"),
        "{ldd}"
    );
    let help = stdout(&run(&binary, &["--help"]));
    assert!(help.contains(&format!("Usage: {}", operator.binary)), "{help}");

    // One name everywhere: the layout's tag on the image the packaging names, which the
    // operator also defaults to for the pods it runs its own image in.
    let reference = image::reference(operator, VERSION);
    assert!(reference.ends_with(&format!(":{tag}")));
    for (place, name) in names_in_packaging(operator) {
        assert_eq!(name, reference, "{place} names another image");
    }
    if help.contains("OPERATOR_IMAGE") {
        assert!(
            help.contains(&format!("[default: {reference}]")),
            "the operator's own image defaults to {reference}:\n{help}"
        );
    }

    let size: u64 = std::fs::read_dir(layout.join("blobs/sha256"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap().len())
        .sum();
    let binary_size = std::fs::metadata(&binary).unwrap().len();
    eprintln!(
        "{reference}: {:.1} MiB compressed (binary {:.1} MiB), built in {:.1?}",
        size as f64 / f64::from(1 << 20),
        binary_size as f64 / f64::from(1 << 20),
        elapsed
    );
    assert!(size < MAX_IMAGE_BYTES, "{reference} is {size} bytes compressed");
    size
}

#[test]
fn every_operator_image_is_a_small_static_non_root_oci_layout() {
    let scratch = std::env::temp_dir().join(format!("quorum-images-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut sizes = Vec::new();
    for operator in &xtask::operators() {
        sizes.push((operator.binary, check_image(operator, &scratch)));
    }
    eprintln!("compressed image sizes (bytes): {sizes:?}");
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// Each operator's Dockerfile (for those who have a container engine) builds the same shape
/// of image: the binary at the same path as the entrypoint, the same user, the same labels.
#[test]
fn every_dockerfile_builds_the_image_xtask_builds() {
    for operator in xtask::operators() {
        let path = xtask::repository_root().join(format!("operators/{}/Dockerfile", operator.engine));
        let dockerfile =
            std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let entrypoint = format!("/usr/local/bin/{}", operator.binary);
        for expected in [
            format!(" {entrypoint}\n"),
            "USER 65532:65532\n".to_string(),
            format!("ENTRYPOINT [\"{entrypoint}\"]\n"),
            "org.opencontainers.image.source=\"https://github.com/quorum-dev/quorum\"".to_string(),
            "org.opencontainers.image.licenses=\"Apache-2.0\"".to_string(),
            format!("-t {}", image::reference(&operator, VERSION)),
        ] {
            assert!(
                dockerfile.contains(&expected),
                "{} lacks {expected:?}:\n{dockerfile}",
                path.display()
            );
        }
        if operator.engine == "etcd" {
            assert!(dockerfile.contains("/usr/local/bin/etcdutl"), "{dockerfile}");
        }
    }
}

#[test]
fn a_layout_flag_that_names_something_else_is_refused() {
    let scratch = std::env::temp_dir().join(format!("quorum-not-a-layout-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("notes.txt"), "keep me").unwrap();
    let operator = &xtask::operators()[0];
    let error = image::build(operator, &scratch, image::Profile::Dev, &image::Source::Workspace)
        .expect_err("a directory that is not an OCI layout is not replaced");
    assert!(error.to_string().contains("is not an OCI layout"), "{error:#}");
    assert_eq!(
        std::fs::read_to_string(scratch.join("notes.txt")).unwrap(),
        "keep me"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}
