#!/usr/bin/env bash
# Installs what the demo and the tests need on a fresh machine, and nothing on a warm one.
#
#   e2e/setup.sh system   Debian packages and Rust components: what building the workspace needs
#   e2e/setup.sh demo     system, then the local control plane and its real node (Go-built, cached by version)
#   e2e/setup.sh [all]    demo, then the packaging tools only the packaging tests use (helm, opm,
#                         operator-sdk, OLM, the gRPC health probe) and the test-only servers (the
#                         previous etcd, an S3 server)
#   e2e/setup.sh tools    what `all` builds from Go modules, once `system` is done: installs nothing
#                         and touches no Cargo state, so it can run beside a Rust build (`make test`
#                         does, on a cold machine the two take turns on the processors)
#
# Each prerequisite is checked by what the build or the tests actually use (a command, a file),
# so a package that is installed but incomplete is found too. `e2e/setup.sh check` only lists
# what is missing, one line each, and exits 1 if anything is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "[setup] $*" >&2; }

need_cmd() { command -v "$1" >/dev/null 2>&1; }

# Debian packages, each by what proves it present: a command on PATH, or a file the build or the
# tests read (an absolute path).
declare -A packages=(
  [openssl]=openssl
  [curl]=curl
  [git]=git
  [unzip]=unzip
  [protoc]=protobuf-compiler
  # The well-known .proto files (descriptor.proto and friends) that etcd-client's build script
  # compiles against; protobuf-compiler alone, without recommends, leaves them out.
  [/usr/include/google/protobuf/descriptor.proto]=libprotobuf-dev
  # The linker driver and C compiler some crates' build scripts call (ring, the static images).
  [cc]=gcc
  [/usr/include/stdio.h]=libc6-dev
  [make]=make
  # The CA bundle the images carry for the operators' TLS clients (S3 backups).
  [/etc/ssl/certs/ca-certificates.crt]=ca-certificates
  # Real database servers for the admin layers' and operators' tests, and for the member images
  # (MySQL's own server is not packaged by Debian: MariaDB stands in, and MySQL's SQL is pinned
  # by unit tests).
  [mariadbd]=mariadb-server
  [mariadb]=mariadb-client
  # The physical copy of a MariaDB member's files (mariadb-backup, mbstream).
  [mariadb-backup]=mariadb-backup
  [redis-server]=redis-server
  [redis-sentinel]=redis-sentinel
  # Images as OCI layouts without a container engine (`cargo xtask image`, e2e/images.sh), and the
  # image test's look at the binaries inside them.
  [umoci]=umoci
  # The MariaDB and Redis images' root file systems (e2e/images.sh) and the fresh-machine check's
  # clean root (e2e/fresh-check.sh), from the configured Debian mirror.
  [mmdebstrap]=mmdebstrap
  [file]=file
  # The real node: container runtime, CNI plugins, kube-proxy's and the kubelet's packet filter,
  # and a static busybox for the small helper images.
  [containerd]=containerd
  [runc]=runc
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
  [conntrack]=conntrack
  [ip]=iproute2
  [/bin/busybox]=busybox-static
)

missing_packages() {
  local what
  for what in "${!packages[@]}"; do
    if [[ $what == /* ]]; then [[ -e $what ]] && continue; else need_cmd "$what" && continue; fi
    echo "${packages[$what]} $what"
  done | sort -u
}

check_toolchains() {
  local ok=0
  need_cmd go || { echo "missing: go (Go >= 1.24, on PATH)"; ok=1; }
  need_cmd cargo || { echo "missing: cargo (Rust >= 1.89, on PATH)"; ok=1; }
  return $ok
}

if [[ ${1:-} == check ]]; then
  status=0
  check_toolchains || status=1
  while read -r package what; do
    [[ -n $package ]] || continue
    echo "missing: $what (Debian package $package)"; status=1
  done < <(missing_packages)
  exit $status
fi

stage=${1:-all}
case $stage in system | demo | all | tools) ;; *) echo "usage: $0 [system|demo|all|tools|check]" >&2; exit 2 ;; esac

check_toolchains >&2 || exit 1

go_tools() {
  for tool in etcd kwok k8s coredns local-path pause; do "$here/toolchain/build.sh" "$tool" >/dev/null; done
  # The real node's registry.
  "$here/toolchain/packaging.sh" registry >/dev/null
  [[ $stage == demo ]] && return
  for tool in etcd-previous s3; do "$here/toolchain/build.sh" "$tool" >/dev/null; done
  "$here/toolchain/packaging.sh" all >/dev/null
}

if [[ $stage == tools ]]; then
  still=$(missing_packages)
  [[ -z $still ]] || { log "run e2e/setup.sh system first; missing (package, what it should provide):"; echo "$still" >&2; exit 1; }
  go_tools
  exit 0
fi

mapfile -t missing < <(missing_packages | cut -d' ' -f1 | sort -u)
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_=""; [[ $(id -u) -ne 0 ]] && sudo_=sudo
  $sudo_ apt-get update -qq
  # A packaged service that starts listens on 127.0.0.1 only; the tests run their own server
  # processes on other loopback addresses, so the two never collide. Debian's containerd service
  # is never used: the real node runs its own containerd with its own socket and state.
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  still=$(missing_packages)
  if [[ -n $still ]]; then
    log "still missing after the install (package, what it should provide):"; echo "$still" >&2; exit 1
  fi
fi

if need_cmd rustup; then
  installed=$(rustup component list --installed 2>/dev/null || true)
  for component in rustfmt clippy; do
    grep -q "^$component" <<<"$installed" || { log "adding Rust component $component"; rustup component add "$component"; }
  done
fi

# Incremental-compilation state left by builds nobody repeats (other checkouts, old crate
# versions) only fills the shared cache (it reached 21 GiB on a disk that then ran full): drop
# what has not been touched for a day, and all of it when the disk has less than 15 GiB free.
if [[ -n ${CARGO_TARGET_DIR:-} && -d $CARGO_TARGET_DIR/debug/incremental ]]; then
  find "$CARGO_TARGET_DIR/debug/incremental" -mindepth 1 -maxdepth 1 -type d -mtime +0 -exec rm -rf {} + 2>/dev/null || true
  free_kib=$(df -Pk "$CARGO_TARGET_DIR" | awk 'NR == 2 {print $4}')
  if (( free_kib < 15 * 1024 * 1024 )); then
    rm -rf "$CARGO_TARGET_DIR/debug/incremental"
  fi
fi

[[ $stage == system ]] && exit 0

go_tools
