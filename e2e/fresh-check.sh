#!/usr/bin/env bash
# A fresh-machine check that does not depend on what this machine already has: a clean Debian
# bookworm root file system (minbase, from the package mirror apt is configured with) gets only the
# Go and Rust toolchains of this machine (read-only bind mounts at the same paths), then runs the
# README's setup (`e2e/setup.sh system`) and a cold build of the whole workspace inside it, in
# unshared mount, PID and UTS namespaces with chroot.
#
#   e2e/fresh-check.sh                    build (or reuse) the root file system and run the check
#   e2e/fresh-check.sh check              `cargo check` instead of a build: every build script still
#                                         runs (the crates that compile C, run protoc or probe the
#                                         system: where a missing prerequisite shows) at a fraction of
#                                         the cost, but nothing is linked; what `make test` runs
#   FRESH_SETUP_STAGE=demo ...            run a later setup stage (it builds the Go toolchain: long)
#
# A check that passed is recorded under a key of everything that decides its outcome (the setup
# script, Cargo.lock, every Cargo.toml and build.rs, the Rust and Go versions, the root file
# system's sources); the same check with the same key is not run again.
#
# It prints every prerequisite the clean root lacks before the setup runs, then fails if the setup
# leaves any missing or the workspace does not build. The root file system is cached by its package
# list and sources under QUORUM_CACHE (default ~/.cache/quorum)/fresh-check; each run unpacks a new
# copy, so nothing a previous run installed is seen. Needs root, mmdebstrap and unshare.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${QUORUM_CACHE:-$HOME/.cache/quorum}/fresh-check
stage=${FRESH_SETUP_STAGE:-system}
scope=${1:-workspace}
case $scope in workspace | check) ;; *) echo "usage: $0 [workspace|check]" >&2; exit 2 ;; esac
log() { echo "[fresh-check] $*" >&2; }

[[ $(id -u) -eq 0 ]] || { log "needs root (chroot, mounts and namespaces)"; exit 1; }
command -v mmdebstrap >/dev/null || { log "needs mmdebstrap (Debian package mmdebstrap)"; exit 1; }

# The mirror apt is configured with: the deb822 sources file or the one-line list, as they are.
sources=""
for candidate in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
  [[ -s $candidate ]] && grep -q '^[^#]' "$candidate" && { sources=$candidate; break; }
done
[[ -n $sources ]] || { log "no apt sources found to build the root file system from"; exit 1; }

variant=minbase
key=$( { echo "$variant bookworm"; grep -v '^#' "$sources"; } | sha256sum | cut -c1-16)
tarball="$cache/rootfs-bookworm-$variant-$key.tar"
mkdir -p "$cache"
if [[ ! -s $tarball ]]; then
  log "building a clean bookworm root file system ($variant) from $sources"
  # mmdebstrap picks the output's format by its extension: keep .tar on the partial file.
  mmdebstrap --quiet --variant="$variant" bookworm "${tarball%.tar}.partial.tar" "$sources"
  mv "${tarball%.tar}.partial.tar" "$tarball"
fi

inputs=$( { echo "$scope $stage $key"; rustc -V; go version
  cd "$root" && git ls-files -z -- e2e/setup.sh Cargo.lock '*Cargo.toml' '*build.rs' | xargs -0 sha256sum; } | sha256sum | cut -c1-16)
stamp="$cache/passed-$scope-$inputs"
if [[ -f $stamp ]]; then
  log "unchanged since it passed at $(cat "$stamp") ($scope; key $inputs): not run again"
  exit 0
fi

if [[ $scope == check ]]; then
  build="cargo check --workspace --all-targets --quiet"
else
  build="cargo build --workspace --all-targets --quiet"
fi

work=$(mktemp -d "$cache/run.XXXXXX")
fs="$work/rootfs"
cleanup() {
  # Mounts live in the unshared mount namespace and go with it; the files are ours to remove.
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$fs"
tar -C "$fs" -xf "$tarball"
cp /etc/resolv.conf "$fs/etc/resolv.conf"

goroot=$(go env GOROOT)
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for path in "$goroot" "$rustup_home" "$cargo_home/bin" "$cargo_home/registry" /src; do mkdir -p "$fs$path"; done
# The checkout as git sees it (tracked files only), so nothing built or left in the work tree leaks in.
git -C "$root" ls-files -z | (cd "$root" && tar --null -T - -cf -) | tar -C "$fs/src" -xf -

inner_path="$goroot/bin:$cargo_home/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The crates come from this machine's registry cache, fetched here first: the clean root has
# none of this machine's network configuration (a proxy's certificate authority, say), and what
# it checks is the setup, not the way to crates.io. Inside, cargo stays offline.
log "fetching the workspace's crates into $cargo_home/registry"
(cd "$root" && cargo fetch --locked --quiet)
started=$(date +%s)
log "running e2e/setup.sh $stage and the workspace build in the clean root"
unshare --mount --pid --uts --fork --propagation private bash -euo pipefail -c '
  fs=$1 goroot=$2 rustup_home=$3 cargo_home=$4 stage=$5 inner_path=$6 build=$7
  hostname fresh-check
  mount -t proc proc "$fs/proc"
  mount --rbind /dev "$fs/dev"
  mount -t sysfs sysfs "$fs/sys"
  mount -t tmpfs tmpfs "$fs/tmp"
  for path in "$goroot" "$rustup_home" "$cargo_home/bin"; do
    mount --bind "$path" "$fs$path"; mount -o remount,bind,ro "$fs$path"
  done
  # Downloaded crate sources only: what cargo would fetch from crates.io anyway.
  mount --bind "$cargo_home/registry" "$fs$cargo_home/registry"
  exec chroot "$fs" /usr/bin/env -i HOME=/root PATH="$inner_path" RUSTUP_HOME="$rustup_home" \
    CARGO_HOME="$cargo_home" CARGO_NET_OFFLINE=true CARGO_TARGET_DIR=/tmp/target TERM=dumb /bin/bash -euo pipefail -c "
      cd /src
      echo \"[fresh-check] what a clean bookworm lacks, before the setup:\" >&2
      e2e/setup.sh check >&2 || true
      e2e/setup.sh $stage
      echo \"[fresh-check] after the setup:\" >&2
      e2e/setup.sh check >&2
      echo \"[fresh-check] $build\" >&2
      $build
    "
' fresh-check "$fs" "$goroot" "$rustup_home" "$cargo_home" "$stage" "$inner_path" "$build"
log "passed in $(( $(date +%s) - started ))s: setup ($stage) and a cold build ($scope) on a clean bookworm"
date -u +%FT%TZ > "$stamp"
