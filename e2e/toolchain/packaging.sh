#!/usr/bin/env bash
# Builds the packaging tools (helm, opm, operator-sdk, promtool, OLM, the registry and the gRPC
# health probe) from their Go modules into a cache outside the
# repository, keyed by version, and prints the directory that holds them. A warm run builds nothing.
#
#   e2e/toolchain/packaging.sh [helm|opm|operator-sdk|olm|promtool|registry|grpc-health-probe|all]
#
# QUORUM_CACHE (default ~/.cache/quorum) is the cache root. Versions come from versions.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${QUORUM_CACHE:-$HOME/.cache/quorum}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "[packaging] $*" >&2; }

# helm v3 has no replaces in its go.mod: `go install` works. Its release builds stamp the version,
# and the Kubernetes version that `helm template` and `helm lint` assume when there is no cluster:
# derived from its k8s.io/client-go (v0.N => 1.N) as its Makefile does. Unstamped, that version is
# v1.20.0, and a chart with `kubeVersion: >=1.30.0-0` is refused by `helm template`.
build_helm() {
  local out="$cache/bin/helm-$HELM_VERSION"
  if [[ -x "$out/helm" ]]; then echo "$out"; return; fi
  log "building helm $HELM_VERSION"
  mkdir -p "$out"
  local upstream_mod k8s_minor
  upstream_mod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  k8s_minor=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$upstream_mod")
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  local pkg
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  GOBIN="$out" go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  echo "$out"
}

# promtool: Prometheus's go.mod has no replaces, so `go install` works (module v0.3xx.y is
# Prometheus 3.x).
build_promtool() {
  local out="$cache/bin/promtool-$PROMETHEUS_VERSION"
  if [[ -x "$out/promtool" ]]; then echo "$out"; return; fi
  log "building promtool $PROMETHEUS_VERSION"
  mkdir -p "$out"
  GOBIN="$out" go install -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
  echo "$out"
}

# A wrapper module that requires MODULE@VERSION and builds PACKAGE from it into OUT/NAME.
# `go install PACKAGE@VERSION` is not usable for the operator-framework modules: it asks the proxy
# for the module's version list (to look for a deprecation notice), and the proxy answers that with
# 403. Requiring an exact version in a wrapper's go.mod never asks for the list.
#
#   build_in_wrapper NAME MODULE VERSION PACKAGE TAGS LDFLAGS
build_in_wrapper() {
  local name=$1 module=$2 version=$3 package=$4 tags=$5 ldflags=$6
  local out="$cache/bin/$name-$version" work="$cache/build/$name-$version"
  rm -rf "$work"; mkdir -p "$work" "$out"
  local upstream_mod
  upstream_mod=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module quorum.dev/toolchain/$name"
    echo
    echo "go $(sed -n 's/^go //p' "$upstream_mod")"
    echo
    echo "require $module $version"
    # Replaces only take effect in the main module: copy upstream's (none are local in the
    # versions pinned here; a local one would fail loudly in `go mod tidy`).
    sed -n '/^replace (/,/^)/p; /^replace [^(]/p' "$upstream_mod"
  } > "$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$package" > "$work/tools.go"
  (cd "$work" && go mod tidy)
  (cd "$work" && go build -tags "$tags" -ldflags "$ldflags" -o "$out/$name.tmp" "$package")
  mv "$out/$name.tmp" "$out/$name"
}

# opm: json1 is for the sqlite registry code; containers_image_openpgp avoids gpgme (cgo).
build_opm() {
  local out="$cache/bin/opm-$OPM_VERSION"
  if [[ -x "$out/opm" ]]; then echo "$out"; return; fi
  log "building opm $OPM_VERSION"
  local v=github.com/operator-framework/operator-registry/cmd/opm/version
  build_in_wrapper opm github.com/operator-framework/operator-registry "$OPM_VERSION" \
    github.com/operator-framework/operator-registry/cmd/opm json1,containers_image_openpgp \
    "-s -w -X $v.opmVersion=$OPM_VERSION -X $v.gitCommit=$OPM_VERSION -X $v.buildDate=1970-01-01T00:00:00Z"
  echo "$out"
}

# operator-sdk: the module proxy serves v1.42.0's .info and .zip but answers 403 for its .mod and
# for the version list, so neither `go install` nor a wrapper's `require` can resolve it. The zip is
# fetched from the proxy directly, checked against the digest pinned in versions.env, and built as
# the main module (so its own go.mod, go.sum and any replaces apply as upstream's release does).
build_operator_sdk() {
  local out="$cache/bin/operator-sdk-$OPERATOR_SDK_VERSION"
  if [[ -x "$out/operator-sdk" ]]; then echo "$out"; return; fi
  log "building operator-sdk $OPERATOR_SDK_VERSION"
  local module=github.com/operator-framework/operator-sdk
  local work="$cache/build/operator-sdk-$OPERATOR_SDK_VERSION"
  local proxy; proxy=$(go env GOPROXY); proxy=${proxy%%[,|]*}
  if [[ $proxy == direct || $proxy == off || -z $proxy ]]; then
    log "operator-sdk is fetched from the Go module proxy; set GOPROXY to one"; exit 1
  fi
  rm -rf "$work"; mkdir -p "$work" "$out"
  curl -fsSL -o "$work/src.zip" "$proxy/$module/@v/$OPERATOR_SDK_VERSION.zip"
  echo "$OPERATOR_SDK_ZIP_SHA256  $work/src.zip" | sha256sum -c --quiet -
  (cd "$work" && unzip -q src.zip)
  local src="$work/$module@$OPERATOR_SDK_VERSION"
  local v=github.com/operator-framework/operator-sdk/internal/version
  local k8s_minor
  k8s_minor=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$src/go.mod")
  (cd "$src" && go build -tags containers_image_openpgp \
    -ldflags "-s -w -X $v.Version=$OPERATOR_SDK_VERSION -X $v.GitVersion=$OPERATOR_SDK_VERSION -X $v.GitCommit=$OPERATOR_SDK_VERSION -X $v.KubernetesVersion=v1.$k8s_minor.0" \
    -o "$out/operator-sdk.tmp" ./cmd/operator-sdk)
  mv "$out/operator-sdk.tmp" "$out/operator-sdk"
  echo "$out"
}

# OLM v0: its `olm` and `catalog` operators (host processes in the OLM tests, pods from OLM's image
# on the real node), what that image also carries (`package-server`; `cpb` and `copy-content`,
# which the bundle unpack Jobs and catalog pods copy out of it), and the CRDs they serve (from the
# github.com/operator-framework/api version OLM's go.mod requires, under `crds/`), with OLM's own
# Helm chart (under `chart/`), which installs it in a cluster. OLM's go.mod has non-local replaces
# (grpc, cel-go, openshift api/client-go), so `go install` is refused: one wrapper module requires
# OLM, copies those replaces and builds every command, which share one dependency graph.
# Output: OUT/{olm,catalog,package-server,cpb,copy-content}, OUT/crds/*.yaml and OUT/chart.
olm_commands=(olm catalog package-server cpb copy-content)
build_olm() {
  local out="$cache/bin/olm-$OLM_VERSION" cmd built=1
  for cmd in "${olm_commands[@]}"; do [[ -x "$out/$cmd" ]] || built=0; done
  if [[ $built == 1 && -d "$out/crds" && -d "$out/chart" ]]; then echo "$out"; return; fi
  log "building OLM $OLM_VERSION (olm, catalog)"
  local module=github.com/operator-framework/operator-lifecycle-manager
  local work="$cache/build/olm-$OLM_VERSION"
  rm -rf "$work"; mkdir -p "$work" "$out"
  local upstream_mod
  upstream_mod=$(go mod download -json "$module@$OLM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module quorum.dev/toolchain/olm"
    echo
    echo "go $(sed -n 's/^go //p' "$upstream_mod")"
    echo
    echo "require $module $OLM_VERSION"
    sed -n '/^replace (/,/^)/p; /^replace [^(]/p' "$upstream_mod"
  } > "$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "%s/cmd/olm"\n\t_ "%s/cmd/catalog"\n\t_ "%s/cmd/package-server"\n\t_ "%s/cmd/copy-content"\n\t_ "%s/util/cpb"\n)\n' \
    "$module" "$module" "$module" "$module" "$module" > "$work/tools.go"
  (cd "$work" && go mod tidy)
  local v=$module/pkg/version
  local ldflags="-s -w -X $v.OLMVersion=$OLM_VERSION -X $v.GitCommit=$OLM_VERSION"
  local cmd
  local package
  for cmd in "${olm_commands[@]}"; do
    package=$module/cmd/$cmd
    [[ $cmd == cpb ]] && package=$module/util/cpb
    (cd "$work" && go build -tags json1,containers_image_openpgp -ldflags "$ldflags" -o "$out/$cmd.tmp" "$package")
    mv "$out/$cmd.tmp" "$out/$cmd"
  done
  local olm_dir
  olm_dir=$(cd "$work" && go list -m -f '{{.Dir}}' "$module")
  rm -rf "$out/chart"; cp -r "$olm_dir/deploy/chart" "$out/chart.tmp"; chmod -R u+w "$out/chart.tmp"
  mv "$out/chart.tmp" "$out/chart"
  # The CRDs: from the operator-framework/api version the wrapper resolved (OLM's own requirement).
  local api_dir
  api_dir=$(cd "$work" && go list -m -f '{{.Dir}}' github.com/operator-framework/api)
  rm -rf "$out/crds"; mkdir -p "$out/crds.tmp"
  cp "$api_dir"/crds/operators.coreos.com_*.yaml "$out/crds.tmp/"
  chmod u+w "$out"/crds.tmp/*.yaml
  mv "$out/crds.tmp" "$out/crds"
  echo "$out"
}

# The OCI registry (distribution's `registry` command) that OLM's images, our bundles and the
# catalog are pushed to on the real node.
build_registry() {
  local out="$cache/bin/registry-$DISTRIBUTION_VERSION"
  if [[ -x "$out/registry" ]]; then echo "$out"; return; fi
  log "building the registry (distribution $DISTRIBUTION_VERSION)"
  build_in_wrapper registry github.com/distribution/distribution/v3 "$DISTRIBUTION_VERSION" \
    github.com/distribution/distribution/v3/cmd/registry "" "-s -w"
  echo "$out"
}

# grpc_health_probe: OLM's catalog pods probe the catalog by running it by that name.
build_grpc_health_probe() {
  local out="$cache/bin/grpc-health-probe-$GRPC_HEALTH_PROBE_VERSION"
  if [[ -x "$out/grpc-health-probe" ]]; then echo "$out"; return; fi
  log "building grpc_health_probe $GRPC_HEALTH_PROBE_VERSION"
  build_in_wrapper grpc-health-probe github.com/grpc-ecosystem/grpc-health-probe "$GRPC_HEALTH_PROBE_VERSION" \
    github.com/grpc-ecosystem/grpc-health-probe "" "-s -w"
  echo "$out"
}

case "${1:-all}" in
  helm) build_helm ;;
  opm) build_opm ;;
  operator-sdk) build_operator_sdk ;;
  olm) build_olm ;;
  promtool) build_promtool ;;
  registry) build_registry ;;
  grpc-health-probe) build_grpc_health_probe ;;
  all) build_helm; build_opm; build_operator_sdk; build_olm; build_promtool; build_registry; build_grpc_health_probe ;;
  *) echo "usage: $0 [helm|opm|operator-sdk|olm|promtool|registry|grpc-health-probe|all]" >&2; exit 2 ;;
esac
