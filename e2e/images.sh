#!/usr/bin/env bash
# Images without a registry: each an OCI image assembled with umoci from pinned inputs (Go-built
# binaries from e2e/toolchain, Debian's packages, the operators' own static binaries), written as an
# OCI archive cached by its content under QUORUM_CACHE/images, and imported into the real node's
# containerd under the same reference the charts, CSVs and operators name.
#
#   e2e/images.sh build [node|engines|operators|peer|previous|olm|all]  build what is missing, print the archives
#   e2e/images.sh import [node|engines|operators|peer|previous|olm|all] build, then import into the node's containerd
#   e2e/images.sh references                           the references, as NAME=REFERENCE words
#   e2e/images.sh previous-release                     the previous release's checkout (its charts)
#
# node: the pod sandbox, CoreDNS, the volume provisioner and its helper; engines: the database
# images; operators: the four operators (`cargo xtask image`, unoptimized unless
# QUORUM_OPERATOR_PROFILE=release, as `make bench` builds them; the image's shape does not depend
# on optimization); peer: the benchmark's baseline operator (etcd-io/etcd-operator,
# `make bench` only, not part of `all`); previous: the MySQL operator of the release the operator
# upgrade test starts from (PREVIOUS_RELEASE_COMMIT, `make test` only, not part of `all`); olm:
# OLM v0's image (its operators and the tools its unpack Jobs copy out of it) and opm's image
# (the bundle unpack Jobs' extractor), under the names OLM's own chart gives them, for the test
# that installs OLM in the cluster and has them pulled from the node's registry (not part of
# `all`: they are pushed there, not imported).
#
# QUORUM_WORKSPACE_BINARIES: a directory where the workspace's debug `xtask` and `mongo-sim` are
# already built (the test command's test build); without it, cargo builds them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=toolchain/versions.env
source "$here/toolchain/versions.env"
cache=${QUORUM_CACHE:-$HOME/.cache/quorum}
images="$cache/images"
log() { echo "[images] $*" >&2; }

# References, as the node's manifests, the operators and the charts name them.
PAUSE_IMAGE=registry.k8s.io/pause:3.10
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:$COREDNS_VERSION
LOCAL_PATH_IMAGE=docker.io/rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION
HELPER_IMAGE=docker.io/library/busybox:1.35
ETCD_IMAGE=gcr.io/etcd-development/etcd:$ETCD_VERSION
# The members' default images, as the operators name them (the tags are the packaged versions the
# operators default to, and Debian's packages carry the same versions).
MARIADB_IMAGE=docker.io/library/mariadb:10.11.19
REDIS_IMAGE=docker.io/library/redis:7.0.15
# Not MongoDB: the replica-set simulator (e2e/src/mongo_sim) under the name and entry-point
# contract of the official image, since no MongoDB server can be had here.
MONGO_IMAGE=docker.io/library/mongo:7.0.14
# An S3-compatible store inside the cluster (gofakes3, in memory), for backups that the
# operators' pods write and their members' init containers read. Tests only: not a product image.
S3_IMAGE=localhost/quorum-e2e/gofakes3:$GOFAKES3_VERSION
# The benchmark's baseline: etcd-io/etcd-operator built from its source (e2e/toolchain/build.sh
# peer), packed like our images. Benchmarks only: nothing of it is in a product image.
PEER_IMAGE=localhost/quorum-bench/etcd-operator:$PEER_ETCD_OPERATOR_COMMIT
# The previous release's MySQL operator, under a repository of its own so the current image
# keeps its name; the tag is the one its layout carries.
PREVIOUS_REPOSITORY=localhost/quorum-e2e/previous-mysql-operator
PREVIOUS_CHECKOUT=$cache/build/previous-$PREVIOUS_RELEASE_COMMIT
OLM_IMAGE=quay.io/operator-framework/olm:$OLM_VERSION
OPM_IMAGE=quay.io/operator-framework/opm:$OPM_VERSION

# Copies a static busybox and its applets into ROOTFS/bin (a shell for helper pods and for
# `kubectl exec`).
with_busybox() {
  local rootfs=$1 applet
  mkdir -p "$rootfs/bin" "$rootfs/tmp"; chmod 1777 "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [[ $applet == busybox || -e $rootfs/bin/$applet ]] || ln -s busybox "$rootfs/bin/$applet"
  done
}

# Copies BINARY and the shared libraries it loads into ROOTFS at the same paths.
with_libraries() {
  local rootfs=$1 binary=$2 library
  mkdir -p "$rootfs$(dirname "$binary")"; cp -L "$binary" "$rootfs$binary"
  for library in $(ldd "$binary" | grep -o '/[^ :]*\.so[^ :]*' | sort -u); do
    mkdir -p "$rootfs$(dirname "$library")"; cp -L "$library" "$rootfs$library"
  done
}

# passwd and group with root and the non-root user the pods run as.
with_users() {
  local rootfs=$1 user=${2:-65532}
  mkdir -p "$rootfs/etc"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/nonexistent:/sbin/nologin\n' "$user" "$user" > "$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\n' "$user" > "$rootfs/etc/group"
}

# The search path every image sets, as the official images do (servers live in sbin).
image_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# pack REFERENCE ROOTFS USER ENTRYPOINT...: the archive of a one-layer image of ROOTFS, named by a
# digest of its content (with owners and modes), reference, user, search path and entrypoint; built only when no such archive exists.
pack() {
  local reference=$1 rootfs=$2 user=$3; shift 3
  local name=${reference##*/}; name=${name%%:*}
  local key
  key=$( { echo "$reference $user $image_path $*"
    tar -C "$rootfs" --sort=name --mtime=@0 --numeric-owner -cf - . ; } | sha256sum | cut -c1-16)
  local archive="$images/$name-$key.tar"
  if [[ ! -s $archive ]]; then
    local work; work=$(mktemp -d "$images/.pack.XXXXXX")
    local tag=${reference##*:}
    umoci init --layout "$work/oci"
    umoci new --image "$work/oci:$tag"
    umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
    cp -a "$rootfs/." "$work/bundle/rootfs/"
    umoci repack --image "$work/oci:$tag" "$work/bundle"
    local arguments=(--config.user "$user" --config.env "PATH=$image_path" --config.workingdir /)
    local part; for part in "$@"; do arguments+=(--config.entrypoint "$part"); done
    umoci config --image "$work/oci:$tag" "${arguments[@]}"
    umoci gc --layout "$work/oci"
    tar -C "$work/oci" -cf "$archive.tmp" .
    mv "$archive.tmp" "$archive"
    rm -rf "$work"
  fi
  echo "$reference $archive"
}

build_node_images() {
  local stage; stage=$(mktemp -d "$images/.stage.XXXXXX")
  local pause coredns local_path
  pause=$("$here/toolchain/build.sh" pause)
  coredns=$("$here/toolchain/build.sh" coredns)
  local_path=$("$here/toolchain/build.sh" local-path)
  mkdir -p "$stage/pause"; cp "$pause/pause" "$stage/pause/pause"
  pack "$PAUSE_IMAGE" "$stage/pause" 65535 /pause
  mkdir -p "$stage/coredns"; cp "$coredns/coredns" "$stage/coredns/coredns"
  pack "$COREDNS_IMAGE" "$stage/coredns" 65532 /coredns
  mkdir -p "$stage/local-path/usr/bin"; cp "$local_path/local-path-provisioner" "$stage/local-path/usr/bin/"
  pack "$LOCAL_PATH_IMAGE" "$stage/local-path" 0 /usr/bin/local-path-provisioner
  with_busybox "$stage/busybox"
  pack "$HELPER_IMAGE" "$stage/busybox" 0 /bin/sh
  rm -rf "$stage"
}

# The mirror apt is configured with, as a sources file mmdebstrap reads.
apt_sources() {
  local candidate
  for candidate in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [[ -s $candidate ]] && grep -q '^[^#]' "$candidate" && { echo "$candidate"; return; }
  done
  log "no apt sources found to build the engine images from"; exit 1
}

# debian_rootfs DIRECTORY USER PACKAGE...: a bookworm minbase root file system with PACKAGES from
# Debian's archive in DIRECTORY, their service account USER renumbered to 999:999 (the uid the
# official images use and the operators' pods run as) with the files it owned (Debian's
# /etc/redis is the redis account's, mode 2770), without apt's lists or documentation.
# The unpacked tree is cached by the sources, the packages and their candidate versions.
debian_rootfs() {
  local directory=$1 user=$2; shift 2
  local sources; sources=$(apt_sources)
  local packages; packages=$(IFS=,; echo "$*")
  local key
  key=$( { echo "bookworm minbase $packages $user renumbered-with-files"; grep -v '^#' "$sources"
    apt-cache policy "$@" | grep -E '^[^ ]|Candidate'; } | sha256sum | cut -c1-16)
  local cached="$images/rootfs-${1}-$key.tar"
  if [[ ! -s $cached ]]; then
    log "building a bookworm root file system with $packages (cached as $cached)"
    # mmdebstrap picks the output's format by its extension: keep .tar on the partial file.
    mmdebstrap --quiet --variant=minbase --include="$packages" \
      --customize-hook="chroot \"\$1\" sh -c 'uid=\$(id -u $user) gid=\$(id -g $user) && groupmod -g 999 $user && usermod -u 999 -g 999 $user && find / -xdev \\( -uid \$uid -o -gid \$gid \\) -exec chown -h 999:999 {} +'" \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/info' \
      bookworm "${cached%.tar}.partial.tar" "$sources"
    mv "${cached%.tar}.partial.tar" "$cached"
  fi
  mkdir -p "$directory"
  tar -C "$directory" --same-owner -xf "$cached"
}

build_engine_images() {
  local stage; stage=$(mktemp -d "$images/.stage.XXXXXX")
  local etcd; etcd=$("$here/toolchain/build.sh" etcd)
  # etcd as upstream ships it: the three binaries under /usr/local/bin, no shell.
  mkdir -p "$stage/etcd/usr/local/bin" "$stage/etcd/var/lib/etcd" "$stage/etcd/tmp"
  chmod 1777 "$stage/etcd/tmp"
  cp "$etcd"/{etcd,etcdctl,etcdutl} "$stage/etcd/usr/local/bin/"
  with_users "$stage/etcd"
  pack "$ETCD_IMAGE" "$stage/etcd" 0 /usr/local/bin/etcd
  # MariaDB and Redis from Debian's packages. Like the official images, the configured user is
  # root and the server's account is uid 999: the pods the operators build run as 999.
  debian_rootfs "$stage/mariadb" mysql mariadb-server mariadb-backup
  install -d -o 999 -g 999 "$stage/mariadb/var/lib/mysql" "$stage/mariadb/run/mysqld"
  pack "$MARIADB_IMAGE" "$stage/mariadb" 0 /usr/sbin/mariadbd
  debian_rootfs "$stage/redis" redis redis-server redis-sentinel redis-tools
  install -d -o 999 -g 999 "$stage/redis/data"
  pack "$REDIS_IMAGE" "$stage/redis" 0 /usr/bin/redis-server
  # The simulator: its binary (the workspace's debug build) with the libraries it loads, a
  # busybox for the entry point's shell and the init container's `install`, the uid 999 account.
  local mongo_sim
  if [[ -n ${QUORUM_WORKSPACE_BINARIES:-} ]]; then
    mongo_sim=$QUORUM_WORKSPACE_BINARIES/mongo-sim
  else
    (cd "$root" && cargo build --quiet -p quorum-e2e --bin mongo-sim >&2)
    mongo_sim=${CARGO_TARGET_DIR:-$root/target}/debug/mongo-sim
  fi
  with_busybox "$stage/mongo"
  with_libraries "$stage/mongo" "$mongo_sim"
  # Debian's busybox has no `install` applet: coreutils' own, for the key file's private copy.
  with_libraries "$stage/mongo" /usr/bin/install
  mkdir -p "$stage/mongo/usr/local/bin"
  mv "$stage/mongo$mongo_sim" "$stage/mongo/usr/local/bin/mongo-sim"
  install -m 0755 "$here/images/mongo-sim-entrypoint.sh" "$stage/mongo/usr/local/bin/docker-entrypoint.sh"
  with_users "$stage/mongo" 999
  install -d -o 999 -g 999 "$stage/mongo/data/db"
  pack "$MONGO_IMAGE" "$stage/mongo" 999 /usr/local/bin/docker-entrypoint.sh
  local s3; s3=$("$here/toolchain/build.sh" s3)
  mkdir -p "$stage/s3/usr/local/bin"; cp "$s3/gofakes3" "$stage/s3/usr/local/bin/"
  pack "$S3_IMAGE" "$stage/s3" 65532 /usr/local/bin/gofakes3
  rm -rf "$stage"
}

# The workspace's generator: built by the caller when QUORUM_WORKSPACE_BINARIES names where
# (the test command's test build links it with the workspace's features), else by cargo.
xtask() {
  if [[ -n ${QUORUM_WORKSPACE_BINARIES:-} ]]; then
    "$QUORUM_WORKSPACE_BINARIES/xtask" "$@"
  else
    cargo xtask "$@"
  fi
}

build_operator_images() {
  local operator layout reference profile=${QUORUM_OPERATOR_PROFILE:-dev}
  # QUORUM_OPERATORS narrows the build to some of them (`make bench` with --engines does).
  for operator in ${QUORUM_OPERATORS:-etcd-operator mysql-operator redis-operator mongodb-operator}; do
    layout="$images/.layout-$operator-$profile"
    (cd "$root" && xtask image "$operator" --layout "$layout" --profile "$profile" >&2)
    # The tag is the one the layout carries (the workspace's version); the repository is the
    # one `cargo xtask image` documents and the CSVs and charts name.
    local tag
    tag=$(layout_tag <"$layout/index.json")
    reference=ghcr.io/quorum-dev/$operator:$tag
    local stage; stage=$(mktemp -d "$images/.stage.XXXXXX")
    tar -C "$layout" -cf "$stage/layout.tar" .
    local archive="$images/$operator-$(sha256sum "$stage/layout.tar" | cut -c1-16).tar"
    [[ -s $archive ]] || mv "$stage/layout.tar" "$archive"
    rm -rf "$stage"
    echo "$reference $archive"
  done
}

# The tag an OCI layout's index (on standard input) carries: the image's reference name.
layout_tag() {
  grep -o '"org.opencontainers.image.ref.name":"[^"]*"' | head -n 1 | cut -d'"' -f4
}

# The previous release's checkout, from this repository's history (the commit must be in it),
# extracted once.
previous_checkout() {
  if [[ ! -f $PREVIOUS_CHECKOUT/.extracted ]]; then
    rm -rf "$PREVIOUS_CHECKOUT"; mkdir -p "$PREVIOUS_CHECKOUT"
    git -C "$root" archive "$PREVIOUS_RELEASE_COMMIT" | tar -x -C "$PREVIOUS_CHECKOUT" \
      || { log "commit $PREVIOUS_RELEASE_COMMIT (PREVIOUS_RELEASE_COMMIT) is not in this repository's history"; exit 1; }
    touch "$PREVIOUS_CHECKOUT/.extracted"
  fi
  echo "$PREVIOUS_CHECKOUT"
}

# The previous release's MySQL operator: its binary compiled from its checkout (beside the
# workspace's static build, whose dependencies it shares), packed as `cargo xtask image` packs
# the current one; cached by commit.
build_previous_image() {
  local archive="$images/previous-mysql-operator-$PREVIOUS_RELEASE_COMMIT.tar"
  if [[ ! -s $archive ]]; then
    local checkout; checkout=$(previous_checkout) || exit 1
    local layout="$images/.layout-previous-mysql-operator"
    (cd "$root" && xtask image mysql-operator --layout "$layout" --profile dev --source "$checkout" >&2)
    tar -C "$layout" -cf "$archive.partial" . && mv "$archive.partial" "$archive"
    # The archive is what is kept. The checkout's crates were compiled beside the workspace's,
    # which share nearly every dependency with them (`cargo xtask image --source`).
    rm -rf "$layout"
  fi
  local tag
  tag=$(tar -xOf "$archive" ./index.json | layout_tag)
  echo "$PREVIOUS_REPOSITORY:$tag $archive"
}

# The peer's manager alone, as its own Dockerfile ships it (a static binary, a non-root user).
build_peer_image() {
  # Inside the caller's command substitution `set -e` is off: a failed build must stop here.
  local peer; peer=$("$here/toolchain/build.sh" peer) || exit 1
  local stage; stage=$(mktemp -d "$images/.stage.XXXXXX")
  mkdir -p "$stage/peer"
  cp "$peer/manager" "$peer/LICENSE" "$stage/peer/"
  with_users "$stage/peer"
  pack "$PEER_IMAGE" "$stage/peer" 65532 /manager
  rm -rf "$stage"
}

# OLM's image as upstream ships it: its commands under /bin, run as uid 1001 (its deployments
# ask for a non-root user), and coreutils' `cp`, which its unpack Jobs run as `/bin/cp -Rv` to
# copy `cpb` out. opm's: opm and the gRPC health probe, also uid 1001.
build_olm_images() {
  local olm opm probe
  olm=$("$here/toolchain/packaging.sh" olm) || exit 1
  opm=$("$here/toolchain/packaging.sh" opm) || exit 1
  probe=$("$here/toolchain/packaging.sh" grpc-health-probe) || exit 1
  local stage; stage=$(mktemp -d "$images/.stage.XXXXXX")
  mkdir -p "$stage/olm/bin" "$stage/olm/tmp"; chmod 1777 "$stage/olm/tmp"
  cp "$olm"/{olm,catalog,package-server,cpb,copy-content} "$stage/olm/bin/"
  with_libraries "$stage/olm" /bin/cp
  with_users "$stage/olm" 1001
  pack "$OLM_IMAGE" "$stage/olm" 1001 /bin/olm
  mkdir -p "$stage/opm/bin" "$stage/opm/tmp"; chmod 1777 "$stage/opm/tmp"
  cp "$opm/opm" "$stage/opm/bin/opm"
  cp "$probe/grpc-health-probe" "$stage/opm/bin/grpc_health_probe"
  with_users "$stage/opm" 1001
  pack "$OPM_IMAGE" "$stage/opm" 1001 /bin/opm
  rm -rf "$stage"
}

build() {
  mkdir -p "$images"
  case $1 in
    node) build_node_images ;;
    engines) build_engine_images ;;
    operators) build_operator_images ;;
    peer) build_peer_image ;;
    previous) build_previous_image ;;
    olm) build_olm_images ;;
    all) build_node_images; build_engine_images; build_operator_images ;;
    *) echo "usage: $0 build|import [node|engines|operators|peer|previous|olm|all]" >&2; exit 2 ;;
  esac
}

# Imports into the real node's containerd (its socket from e2e/real-node.sh).
import() {
  local socket=${QUORUM_CONTAINERD_SOCKET:-${QUORUM_CLUSTER_DIR:-$cache/cluster}/node/containerd/containerd.sock}
  [[ -S $socket ]] || { log "the real node's containerd is not running ($socket): e2e/cluster.sh start"; exit 1; }
  # Built first, whole: a build failing inside a process substitution would go unnoticed.
  local built reference archive
  built=$(build "$1")
  while read -r reference archive; do
    if ! ctr --address "$socket" -n k8s.io images import --base-name "${reference%:*}" "$archive" >/dev/null 2>"$images/import.err"; then
      log "importing $reference from $archive failed: $(tail -n 1 "$images/import.err")"; exit 1
    fi
    # The list is read whole first: `grep -q` leaving early would fail the pipeline on SIGPIPE.
    local listed
    listed=$(ctr --address "$socket" -n k8s.io images ls -q)
    grep -qxF "$reference" <<<"$listed" \
      || { log "imported $archive but containerd does not list $reference"; exit 1; }
  done <<<"$built"
}

case "${1:-}" in
  references) # NAME=REFERENCE lines, for the node's manifests
    echo "PAUSE_IMAGE=$PAUSE_IMAGE COREDNS_IMAGE=$COREDNS_IMAGE LOCAL_PATH_IMAGE=$LOCAL_PATH_IMAGE"
    echo "HELPER_IMAGE=$HELPER_IMAGE ETCD_IMAGE=$ETCD_IMAGE MARIADB_IMAGE=$MARIADB_IMAGE REDIS_IMAGE=$REDIS_IMAGE MONGO_IMAGE=$MONGO_IMAGE S3_IMAGE=$S3_IMAGE"
    echo "PEER_IMAGE=$PEER_IMAGE OLM_IMAGE=$OLM_IMAGE OPM_IMAGE=$OPM_IMAGE" ;;
  previous-release) previous_checkout ;;
  build) build "${2:-all}" ;;
  import) import "${2:-all}" ;;
  *) echo "usage: $0 build|import [node|engines|operators|peer|previous|olm|all] | references | previous-release" >&2; exit 2 ;;
esac
