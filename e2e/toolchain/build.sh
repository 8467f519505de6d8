#!/usr/bin/env bash
# Builds the control-plane binaries from their Go modules into a cache outside the repository,
# keyed by version, and prints the directory that holds them. A warm run builds nothing.
#
#   e2e/toolchain/build.sh [k8s|etcd|etcd-previous|kwok|s3|coredns|local-path|pause|all|peer]
#
# `k8s` is the control plane and the real node's kubelet and kube-proxy, from one wrapper module.
# `coredns`, `local-path` and `pause` are the real node's cluster DNS, volume provisioner and pod
# sandbox (see e2e/real-node.sh).
# `etcd` is the pinned etcd ($ETCD_VERSION); `etcd-previous` the minor before it
# ($ETCD_PREVIOUS_VERSION), which the rolling-upgrade test starts a cluster at.
#
# `peer` is the benchmark's baseline, etcd-io/etcd-operator, from the source archive in
# ../shared/peers (QUORUM_PEERS) with its own go.mod; not part of `all`, only `make bench` uses it.
#
# QUORUM_CACHE (default ~/.cache/quorum) is the cache root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${QUORUM_CACHE:-$HOME/.cache/quorum}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "[toolchain] $*" >&2; }

# k8s.io/kubernetes cannot be `go install`ed: its staging modules are required at v0.0.0 and
# replaced by local paths. A wrapper module replaces each of them with its published v0.X.Y.
build_k8s() {
  local out="$cache/bin/k8s-$K8S_VERSION"
  local commands=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy) command
  local present=0
  for command in "${commands[@]}"; do [[ -x "$out/$command" ]] && present=$((present + 1)); done
  if ((present == ${#commands[@]})); then echo "$out"; return; fi
  log "building ${commands[*]} $K8S_VERSION (cold: many minutes)"
  local work="$cache/build/k8s-$K8S_VERSION"
  rm -rf "$work"; mkdir -p "$work" "$out"
  local staging_version="v0.${K8S_VERSION#v1.}"
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module quorum.dev/toolchain/k8s"
    echo
    echo "go $(sed -n 's/^go //p' "$upstream_mod")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$upstream_mod"
    echo ")"
  } > "$work/go.mod"
  cat > "$work/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  (cd "$work" && go mod tidy >/dev/null 2>&1 || (cd "$work" && go mod tidy))
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for cmd in "${commands[@]}"; do
    [[ -x "$out/$cmd" ]] && continue
    (cd "$work" && go build -tags tools -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
  echo "$out"
}

# etcd's server module has relative replaces too; a two-line main calling etcdmain.Main avoids them.
# etcdutl (offline snapshot restore, run by a restoring member's init container and by the restore
# tests) keeps its command tree in a `main` package, which cannot be imported; its wrapper rebuilds
# that tree from the importable go.etcd.io/etcd/etcdutl/v3/etcdutl commands, as upstream's ctl.go
# does. The command set differs between minor versions (3.5 has backup and check; 3.6 hashkv and
# migrate), so the tree is chosen by version. The 3.5 modules have the same layout otherwise.
#
#   build_etcd VERSION    builds etcd, etcdctl and etcdutl VERSION into $cache/bin/etcd-VERSION
build_etcd() {
  local version=$1
  local out="$cache/bin/etcd-$version"
  if [[ -x "$out/etcd" && -x "$out/etcdctl" && -x "$out/etcdutl" ]]; then echo "$out"; return; fi
  log "building etcd, etcdctl, etcdutl $version"
  local work="$cache/build/etcd-$version"
  local utl_commands
  case "$version" in
    v3.5.*) utl_commands="NewBackupCommand NewDefragCommand NewSnapshotCommand NewVersionCommand NewCheckCommand" ;;
    *) utl_commands="NewDefragCommand NewSnapshotCommand NewHashKVCommand NewVersionCommand NewMigrateCommand" ;;
  esac
  rm -rf "$work"; mkdir -p "$work/etcd" "$work/etcdctl" "$work/etcdutl" "$out"
  cat > "$work/go.mod" <<GOMOD
module quorum.dev/toolchain/etcd

go 1.24

require (
	go.etcd.io/etcd/server/v3 $version
	go.etcd.io/etcd/etcdctl/v3 $version
	go.etcd.io/etcd/etcdutl/v3 $version
)
GOMOD
  cat > "$work/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  cat > "$work/etcdctl/main.go" <<'GO'
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
GO
  {
    cat <<'GO'
package main

import (
	"github.com/spf13/cobra"

	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
	"go.etcd.io/etcd/pkg/v3/cobrautl"
)

func main() {
	root := &cobra.Command{Use: "etcdutl", Short: "An administrative command line tool for etcd3."}
	root.PersistentFlags().StringVarP(&etcdutl.OutputFormat, "write-out", "w", "simple",
		"set the output format (fields, json, protobuf, simple, table)")
	root.AddCommand(
GO
    local command
    for command in $utl_commands; do printf '\t\tetcdutl.%s(),\n' "$command"; done
    cat <<'GO'
	)
	if err := root.Execute(); err != nil {
		cobrautl.ExitWithError(cobrautl.ExitError, err)
	}
}
GO
  } > "$work/etcdutl/main.go"
  (cd "$work" && go mod tidy)
  (cd "$work" && go build -ldflags "-s -w" -o "$out/etcd.tmp" ./etcd && mv "$out/etcd.tmp" "$out/etcd")
  (cd "$work" && go build -ldflags "-s -w" -o "$out/etcdctl.tmp" ./etcdctl && mv "$out/etcdctl.tmp" "$out/etcdctl")
  (cd "$work" && go build -ldflags "-s -w" -o "$out/etcdutl.tmp" ./etcdutl && mv "$out/etcdutl.tmp" "$out/etcdutl")
  echo "$out"
}

build_kwok() {
  local out="$cache/bin/kwok-$KWOK_VERSION"
  if [[ -x "$out/kwok" ]]; then echo "$out"; return; fi
  log "building kwok $KWOK_VERSION"
  mkdir -p "$out"
  GOBIN="$out" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  echo "$out"
}

# An S3-compatible server for the backup sink's tests. gofakes3 ships its own command (memory, bolt
# and filesystem backends, `-initialbucket`), and its go.mod has no replaces, so `go install` suffices.
build_s3() {
  local out="$cache/bin/gofakes3-$GOFAKES3_VERSION"
  if [[ -x "$out/gofakes3" ]]; then echo "$out"; return; fi
  log "building gofakes3 $GOFAKES3_VERSION"
  mkdir -p "$out"
  GOBIN="$out" go install -ldflags "-s -w" "github.com/johannesboyne/gofakes3/cmd/gofakes3@$GOFAKES3_VERSION"
  echo "$out"
}

# CoreDNS with the few plugins the local cluster uses (e2e/toolchain/node/coredns/main.go): its
# module cannot be `go install`ed with a custom plugin list, so a wrapper module requires it.
build_coredns() {
  local out="$cache/bin/coredns-$COREDNS_VERSION"
  if [[ -x "$out/coredns" ]]; then echo "$out"; return; fi
  log "building coredns $COREDNS_VERSION"
  local work="$cache/build/coredns-$COREDNS_VERSION"
  rm -rf "$work"; mkdir -p "$work" "$out"
  printf 'module quorum.dev/toolchain/coredns\n\ngo 1.24.0\n\nrequire github.com/coredns/coredns %s\n' \
    "$COREDNS_VERSION" > "$work/go.mod"
  cp "$here/node/coredns/main.go" "$work/main.go"
  (cd "$work" && go mod tidy && go build -ldflags "-s -w" -o "$out/coredns.tmp" .)
  mv "$out/coredns.tmp" "$out/coredns"
  echo "$out"
}

# The dynamic volume provisioner: a claim deleted really loses its data.
build_local_path() {
  local out="$cache/bin/local-path-provisioner-$LOCAL_PATH_PROVISIONER_VERSION"
  if [[ -x "$out/local-path-provisioner" ]]; then echo "$out"; return; fi
  log "building local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION"
  mkdir -p "$out"
  GOBIN="$out" go install -ldflags "-s -w" \
    "github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION"
  echo "$out"
}

# The pod sandbox's PID 1, keyed by its source.
build_pause() {
  local key; key=$(sha256sum "$here/node/pause/main.go" | cut -c1-12)
  local out="$cache/bin/pause-$key"
  if [[ -x "$out/pause" ]]; then echo "$out"; return; fi
  log "building pause"
  local work="$cache/build/pause-$key"
  rm -rf "$work"; mkdir -p "$work" "$out"
  printf 'module quorum.dev/toolchain/pause\n\ngo 1.24\n' > "$work/go.mod"
  cp "$here/node/pause/main.go" "$work/main.go"
  (cd "$work" && go build -ldflags "-s -w" -o "$out/pause.tmp" .)
  mv "$out/pause.tmp" "$out/pause"
  echo "$out"
}

# The benchmark's baseline operator (its manager, cmd/main.go), keyed by its source archive.
build_peer() {
  local archive=${QUORUM_PEERS:-$here/../../../shared/peers}/etcd-io-etcd-operator-$PEER_ETCD_OPERATOR_COMMIT.tar.gz
  [[ -s $archive ]] || { log "no peer source at $archive: make test and make bench need it (set QUORUM_PEERS to its directory)"; exit 1; }
  local key; key=$( { sha256sum "$archive"; go version; } | sha256sum | cut -c1-12)
  local out="$cache/bin/etcd-operator-peer-$key"
  if [[ -x "$out/manager" && -d "$out/config" ]]; then echo "$out"; return; fi
  log "building the peer etcd-operator from $archive (cold: several minutes)"
  local work="$cache/build/etcd-operator-peer-$key"
  rm -rf "$work"; mkdir -p "$work" "$out"
  tar -C "$work" -xzf "$archive"
  (cd "$work/etcd-operator" && go build -ldflags "-s -w" -o "$out/manager.tmp" ./cmd)
  # Its kustomize tree, for the install as its README gives it (`make deploy`).
  rm -rf "$out/config"; cp -a "$work/etcd-operator/config" "$out/config"
  cp "$work/etcd-operator/LICENSE" "$out/LICENSE"
  mv "$out/manager.tmp" "$out/manager"
  echo "$out"
}

case "${1:-all}" in
  k8s) build_k8s ;;
  etcd) build_etcd "$ETCD_VERSION" ;;
  etcd-previous) build_etcd "$ETCD_PREVIOUS_VERSION" ;;
  kwok) build_kwok ;;
  s3) build_s3 ;;
  coredns) build_coredns ;;
  local-path) build_local_path ;;
  pause) build_pause ;;
  peer) build_peer ;;
  all)
    build_etcd "$ETCD_VERSION"; build_etcd "$ETCD_PREVIOUS_VERSION"; build_kwok; build_s3; build_k8s
    build_coredns; build_local_path; build_pause
    ;;
  *) echo "usage: $0 [k8s|etcd|etcd-previous|kwok|s3|coredns|local-path|pause|all|peer]" >&2; exit 2 ;;
esac
