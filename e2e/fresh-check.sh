#!/usr/bin/env bash
# A fresh-machine check that does not depend on what this machine already has: a clean Debian
# bookworm root file system (minbase, from the package mirror apt is configured with) gets only the
# Go and Rust toolchains of this machine (read-only bind mounts at the same paths), then runs the
# README's setup (`e2e/setup.sh system`) and a cold build of the whole workspace inside it, in
# unshared mount, PID and UTS namespaces with chroot.
#
#   e2e/fresh-check.sh            build (or reuse) the root file system and run the check
#   FRESH_SETUP_STAGE=demo ...    run a later setup stage instead (it builds the Go toolchain: long)
#
# It prints every prerequisite the clean root lacks before the setup runs, then fails if the setup
# leaves any missing or the workspace does not build. The root file system is cached by its package
# list and sources under QUORUM_CACHE (default ~/.cache/quorum)/fresh-check; each run unpacks a new
# copy, so nothing a previous run installed is seen. Needs root, mmdebstrap and unshare.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${QUORUM_CACHE:-$HOME/.cache/quorum}/fresh-check
stage=${FRESH_SETUP_STAGE:-system}
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
  mmdebstrap --quiet --variant="$variant" bookworm "$tarball.tmp" "$sources"
  mv "$tarball.tmp" "$tarball"
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
started=$(date +%s)
log "running e2e/setup.sh $stage and the workspace build in the clean root"
unshare --mount --pid --uts --fork --propagation private bash -euo pipefail -c '
  fs=$1 goroot=$2 rustup_home=$3 cargo_home=$4 stage=$5 inner_path=$6
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
    CARGO_HOME="$cargo_home" CARGO_TARGET_DIR=/tmp/target TERM=dumb /bin/bash -euo pipefail -c "
      cd /src
      echo \"[fresh-check] what a clean bookworm lacks, before the setup:\" >&2
      e2e/setup.sh check >&2 || true
      e2e/setup.sh $stage
      echo \"[fresh-check] after the setup:\" >&2
      e2e/setup.sh check >&2
      echo \"[fresh-check] cargo build --workspace --all-targets\" >&2
      cargo build --workspace --all-targets --quiet
    "
' fresh-check "$fs" "$goroot" "$rustup_home" "$cargo_home" "$stage" "$inner_path"
log "passed in $(( $(date +%s) - started ))s: setup ($stage) and a cold workspace build on a clean bookworm"
