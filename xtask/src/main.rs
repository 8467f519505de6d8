//! `cargo xtask generate` writes the generated files; `cargo xtask check` fails on drift.

use anyhow::bail;

fn main() -> anyhow::Result<()> {
    let root = xtask::repository_root();
    match std::env::args().nth(1).as_deref() {
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
        _ => bail!("usage: cargo xtask generate|check"),
    }
}
