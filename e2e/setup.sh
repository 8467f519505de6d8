#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh machine, and nothing on a warm one:
# Debian packages, Rust components, and the Go-built control plane (cached by version).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "[setup] $*" >&2; }

need_cmd() { command -v "$1" >/dev/null 2>&1; }

for tool in go cargo; do
  need_cmd "$tool" || { echo "[setup] $tool is required (Go >= 1.24, Rust >= 1.89) and was not found" >&2; exit 1; }
done

# Debian packages, by the command that proves each is present.
declare -A packages=(
  [openssl]=openssl
  [curl]=curl
  [git]=git
  [protoc]=protobuf-compiler
  [unzip]=unzip
  # Real database servers for the admin layers' and operators' tests (MySQL's own server is
  # not packaged by Debian: MariaDB stands in, and MySQL's SQL is pinned by unit tests).
  [mariadbd]=mariadb-server
  [mariadb]=mariadb-client
  [redis-server]=redis-server
  [redis-sentinel]=redis-sentinel
  # Operator images as OCI layouts without a container engine (`cargo xtask image`), and the
  # image test's look at the binaries inside them.
  [umoci]=umoci
  [file]=file
)
missing=()
for cmd in "${!packages[@]}"; do need_cmd "$cmd" || missing+=("${packages[$cmd]}"); done
# The CA bundle the images carry for the operators' TLS clients (S3 backups).
[[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_=sudo
  $sudo_ apt-get update -qq
  # A packaged service that starts listens on 127.0.0.1 only; the tests run their own server
  # processes on other loopback addresses, so the two never collide.
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if need_cmd rustup; then
  installed=$(rustup component list --installed 2>/dev/null || true)
  for component in rustfmt clippy; do
    grep -q "^$component" <<<"$installed" || { log "adding Rust component $component"; rustup component add "$component"; }
  done
fi

"$here/toolchain/build.sh" all >/dev/null
"$here/toolchain/packaging.sh" all >/dev/null

# Incremental-compilation state left by builds nobody repeats (other checkouts, old crate
# versions) only fills the shared cache: drop what has not been touched for three days.
if [[ -n ${CARGO_TARGET_DIR:-} && -d $CARGO_TARGET_DIR/debug/incremental ]]; then
  find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -type d -mtime +3 -exec rm -rf {} + 2>/dev/null || true
fi
