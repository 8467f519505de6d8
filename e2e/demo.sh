#!/usr/bin/env bash
# The demo: the local control plane, the operators as host processes, the samples applied,
# and real database processes playing the member pods, shown ready.
#
#   e2e/demo.sh         start (idempotent) and show
#   e2e/demo.sh stop    stop the operators, the members and the control plane
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
demo=${QUORUM_CACHE:-$HOME/.cache/quorum}/demo
log() { echo "[demo] $*" >&2; }

running() { [[ -f "$demo/$1.pid" ]] && kill -0 "$(cat "$demo/$1.pid")" 2>/dev/null; }
launch() {
  local name=$1; shift
  running "$name" && return
  nohup "$@" > "$demo/$name.log" 2>&1 &
  echo $! > "$demo/$name.pid"
}

if [[ "${1:-}" == "stop" ]]; then
  for name in etcd-local-members etcd-operator; do
    running "$name" && kill "$(cat "$demo/$name.pid")" || true
    rm -f "$demo/$name.pid"
  done
  e2e/cluster.sh stop
  rm -rf "$demo"
  exit 0
fi

e2e/setup.sh
e2e/cluster.sh start
eval "$(e2e/cluster.sh env)"
mkdir -p "$demo"
log "building the operators"
cargo build --quiet -p etcd-operator --bins --examples
target=${CARGO_TARGET_DIR:-$root/target}

log "installing the CRDs"
kubectl apply --server-side --force-conflicts -f charts/quorum-etcd-operator/crds/ >/dev/null

log "starting the etcd operator (members on loopback addresses) and the local members"
launch etcd-operator "$target/debug/etcd-operator" --leader-elect=false \
  --metrics-address 127.0.0.1:18080 --member-addresses loopback
etcd_dir=$(e2e/toolchain/build.sh etcd)
launch etcd-local-members "$target/debug/examples/local_members" \
  --etcd "$etcd_dir/etcd" --state "$demo/members"

log "applying the samples"
kubectl apply -f samples/etcd-cluster.yaml >/dev/null
if ! kubectl wait --for=condition=Ready etcdcluster/demo --timeout=180s >/dev/null; then
  log "not ready in time; the operator's log:"
  tail -n 30 "$demo/etcd-operator.log" >&2
  exit 1
fi

kubectl get etcdclusters
echo
kubectl get statefulsets,pods,services,poddisruptionbudgets -l app.kubernetes.io/instance=demo
echo
kubectl get etcdcluster demo -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.health}{"\tleader="}{.leader}{"\n"}{end}'
echo
log "try: kubectl scale etcdcluster demo --replicas=5; kubectl get etcdclusters -w"
log "metrics: curl -s 127.0.0.1:18080/metrics | grep quorum_"
log "stop everything: make demo-stop"
