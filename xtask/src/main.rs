//! `cargo xtask generate` writes the generated files; `cargo xtask check` fails on drift;
//! `cargo xtask bundle` writes a bundle of another version; `cargo xtask image` builds an
//! operator's image as an OCI layout.

use std::path::PathBuf;

use anyhow::{Context, bail};
use xtask::{OperatorPackage, bundle, image};

const USAGE: &str = "usage:
  cargo xtask generate
  cargo xtask check
  cargo xtask bundle <operator> --version <version> --out <dir>
      the operator's bundle at <version>, upgrading from the workspace's version
  cargo xtask image <operator> --layout <dir> [--profile release|dev] [--source <checkout>]
      the operator's image as an OCI layout (a directory), tagged v<workspace version>; with
      --source, its binary compiled from that checkout of the workspace (an earlier release)
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
    let mut options = Vec::new();
    let mut rest = args[1..].iter();
    while let Some(flag) = rest.next() {
        if !known.contains(&flag.as_str()) {
            bail!("unknown option {flag:?}\n{USAGE}");
        }
        let value = rest.next().with_context(|| format!("{flag} needs a value"))?;
        options.push((flag.clone(), value.clone()));
    }
    Ok((operator, options))
}

fn option<'a>(options: &'a [(String, String)], name: &str) -> anyhow::Result<&'a str> {
    options
        .iter()
        .find(|(flag, _)| flag == name)
        .map(|(_, value)| value.as_str())
        .with_context(|| format!("{name} is required\n{USAGE}"))
}
