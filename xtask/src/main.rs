//! `cargo xtask generate` writes the generated files; `cargo xtask check` fails on drift;
//! `cargo xtask bundle` writes a bundle of another version; `cargo xtask image` builds an
//! operator's image as an OCI layout, `bundle-image` and `catalog-image` the OLM images;
//! `cargo xtask push` and `publish` push them to a registry.

use std::path::PathBuf;

use anyhow::{Context, bail};
use xtask::{OperatorPackage, bundle, image, registry};

const USAGE: &str = "usage:
  cargo xtask generate
  cargo xtask check
  cargo xtask bundle <operator> --version <version> --out <dir>
      the operator's bundle at <version>, upgrading from the workspace's version
  cargo xtask image <operator> --layout <dir> [--profile release|dev] [--source <checkout>]
      the operator's image as an OCI layout (a directory), tagged v<workspace version>; with
      --source, its binary compiled from that checkout of the workspace (an earlier release)
  cargo xtask bundle-image <operator> --layout <dir>
      the operator's bundle image as an OCI layout, tagged v<workspace version>
  cargo xtask catalog-image --layout <dir> [--tag <tag>]
      the catalog image (opm serving catalog/index.yaml) as an OCI layout, tagged <tag> (latest)
  cargo xtask push --layout <dir> --tag <tag> --to <registry>/<repository>:<tag>
      the image tagged <tag> in the OCI layout <dir>, pushed (plain HTTP on loopback only)
  cargo xtask publish --registry <host:port> --work <dir>
      every bundle image and the catalog image, built under <dir> and pushed to <registry> under
      the repositories the catalog and the README name (ghcr.io/quorum-dev/...): a registry that
      mirrors ghcr.io serves them to OLM as published
<operator> is an engine (etcd), a binary (etcd-operator) or an OLM package (quorum-etcd-operator).";

fn main() -> anyhow::Result<()> {
    let root = xtask::repository_root();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("generate") => xtask::write_all(&root),
        Some("check") => {
            let drifted = xtask::drifted(&root)?;
            if drifted.is_empty() {
                return Ok(());
            }
            for path in &drifted {
                eprintln!("out of date: {}", path.display());
            }
            bail!("generated files drifted from the Rust types; run `cargo xtask generate` and commit")
        }
        Some("bundle") => {
            let (operator, options) = operator_and_options(&args[1..], &["--version", "--out"])?;
            let version = option(&options, "--version")?;
            let out = PathBuf::from(option(&options, "--out")?);
            let release = bundle::Release::current().followed_by(version);
            bundle::write_bundle(&operator, &release, &out)?;
            println!("{}", out.display());
            Ok(())
        }
        Some("image") => {
            let (operator, options) =
                operator_and_options(&args[1..], &["--layout", "--profile", "--source"])?;
            let layout = PathBuf::from(option(&options, "--layout")?);
            let profile = match options.iter().find(|(name, _)| name == "--profile") {
                Some((_, value)) => value.parse()?,
                None => image::Profile::Release,
            };
            let source = match options.iter().find(|(name, _)| name == "--source") {
                Some((_, checkout)) => image::Source::Checkout(PathBuf::from(checkout)),
                None => image::Source::Workspace,
            };
            let built = image::build(&operator, &layout, profile, &source)?;
            println!("{}:{}", built.layout.display(), built.tag);
            Ok(())
        }
        Some("bundle-image") => {
            let (operator, options) = operator_and_options(&args[1..], &["--layout"])?;
            let layout = PathBuf::from(option(&options, "--layout")?);
            let tag = image::build_bundle_image(&operator, &bundle::Release::current(), &layout)?;
            println!("{}:{tag}", layout.display());
            Ok(())
        }
        Some("catalog-image") => {
            let options = options(&args[1..], &["--layout", "--tag"])?;
            let layout = PathBuf::from(option(&options, "--layout")?);
            let tag = option(&options, "--tag").unwrap_or("latest");
            image::build_catalog_image(&published_catalog(&root)?, &layout, tag)?;
            println!("{}:{tag}", layout.display());
            Ok(())
        }
        Some("push") => {
            let options = options(&args[1..], &["--layout", "--tag", "--to"])?;
            let layout = PathBuf::from(option(&options, "--layout")?);
            let destination: registry::Destination = option(&options, "--to")?.parse()?;
            let digest = registry::push(&layout, option(&options, "--tag")?, &destination)?;
            println!("{destination}@{digest}");
            Ok(())
        }
        Some("publish") => {
            let options = options(&args[1..], &["--registry", "--work"])?;
            let registry_host = option(&options, "--registry")?;
            let work = PathBuf::from(option(&options, "--work")?);
            for pushed in xtask::publish(&published_catalog(&root)?, registry_host, &work)? {
                println!("{pushed}");
            }
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// The operator named first, then `--name value` pairs among `known`.
fn operator_and_options(
    args: &[String],
    known: &[&str],
) -> anyhow::Result<(OperatorPackage, Vec<(String, String)>)> {
    let Some(name) = args.first() else {
        bail!("{USAGE}")
    };
    let operator = xtask::operators()
        .into_iter()
        .find(|operator| [operator.engine, operator.binary, operator.package].contains(&name.as_str()))
        .with_context(|| format!("no operator {name:?}\n{USAGE}"))?;
    Ok((operator, options(&args[1..], known)?))
}

/// `--name value` pairs among `known`, with no operator before them.
fn options(args: &[String], known: &[&str]) -> anyhow::Result<Vec<(String, String)>> {
    let mut options = Vec::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        if !known.contains(&flag.as_str()) {
            bail!("unknown option {flag:?}\n{USAGE}");
        }
        let value = rest.next().with_context(|| format!("{flag} needs a value"))?;
        options.push((flag.clone(), value.clone()));
    }
    Ok(options)
}

/// The committed catalog, `catalog/index.yaml`.
fn published_catalog(root: &std::path::Path) -> anyhow::Result<String> {
    let path = root.join("catalog/index.yaml");
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

fn option<'a>(options: &'a [(String, String)], name: &str) -> anyhow::Result<&'a str> {
    options
        .iter()
        .find(|(flag, _)| flag == name)
        .map(|(_, value)| value.as_str())
        .with_context(|| format!("{name} is required\n{USAGE}"))
}
