#!/usr/bin/env bash
# Every test: formatting, lints, generated-file drift, unit tests, and the integration tests
# against the real local control plane and its real node (started here, stopped on exit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { echo "[test] $*" >&2; }

e2e/setup.sh
log "fresh-machine check (the setup in a clean bookworm root, then cargo check of the workspace)"
e2e/fresh-check.sh check
log "cargo fmt --check"
cargo fmt --all --check
log "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
log "generated files"
cargo xtask check

e2e/cluster.sh start
trap 'e2e/cluster.sh stop' EXIT
log "operator images, imported into the real node"
e2e/images.sh import operators
log "cargo test"
cargo test --workspace --no-fail-fast
