#!/usr/bin/env bash
# Builds the control-plane binaries from their Go modules into a cache outside the repository,
# keyed by version, and prints the directory that holds them. A warm run builds nothing.
#
#   e2e/toolchain/build.sh [k8s|etcd|etcd-previous|kwok|s3|all]
#
# `etcd` is the pinned etcd ($ETCD_VERSION); `etcd-previous` the minor before it
# ($ETCD_PREVIOUS_VERSION), which the rolling-upgrade test starts a cluster at.
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
  if [[ -x "$out/kube-apiserver" && -x "$out/kube-controller-manager" && -x "$out/kube-scheduler" && -x "$out/kubectl" ]]; then
    echo "$out"; return
  fi
  log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $K8S_VERSION (cold: many minutes)"
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
)
GO
  (cd "$work" && go mod tidy >/dev/null 2>&1 || (cd "$work" && go mod tidy))
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
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

case "${1:-all}" in
  k8s) build_k8s ;;
  etcd) build_etcd "$ETCD_VERSION" ;;
  etcd-previous) build_etcd "$ETCD_PREVIOUS_VERSION" ;;
  kwok) build_kwok ;;
  s3) build_s3 ;;
  all) build_etcd "$ETCD_VERSION"; build_etcd "$ETCD_PREVIOUS_VERSION"; build_kwok; build_s3; build_k8s ;;
  *) echo "usage: $0 [k8s|etcd|etcd-previous|kwok|s3|all]" >&2; exit 2 ;;
esac
