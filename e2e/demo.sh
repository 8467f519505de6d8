#!/usr/bin/env bash
# The demo, as a user runs Quorum: the local control plane with its real node, the four
# operators installed by their Helm charts from the locally built images, the samples applied,
# and their members real containers from the operators' StatefulSets, shown ready.
#
#   e2e/demo.sh         start (idempotent) and show
#   e2e/demo.sh stop    uninstall nothing, just stop the control plane and its node (every
#                       container, mount and network device goes with it)
#
# The demo's control plane has no KWOK nodes, so the real node takes every pod, untainted, and
# local-path is the default storage class: the samples apply unchanged.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { echo "[demo] $*" >&2; }

if [[ "${1:-}" == "stop" ]]; then
  e2e/cluster.sh stop
  exit 0
fi

e2e/setup.sh demo
eval "$(e2e/cluster.sh env)"
if [[ -n "$(kubectl get nodes -l type=kwok -o name 2>/dev/null || true)" ]]; then
  log "the running control plane has KWOK nodes (the tests'); restarting it for the demo without them"
  e2e/cluster.sh stop
fi
QUORUM_NODES=0 e2e/cluster.sh start
started=$(date +%s)
helm="$(e2e/toolchain/packaging.sh helm)/helm"

log "images: the node's, the members' and the operators', imported into the node's containerd"
e2e/images.sh import all

# backups.allowHttp: the README's day-two walk-through backs up to an in-cluster store over
# plain HTTP (samples/demo-backup-store.yaml).
for engine in etcd mysql redis mongodb; do
  chart=quorum-$engine-operator
  log "helm upgrade --install $chart charts/$chart --namespace quorum-$engine --create-namespace --set backups.allowHttp=true"
  "$helm" upgrade --install "$chart" "charts/$chart" --namespace "quorum-$engine" --create-namespace \
    --set backups.allowHttp=true --wait --timeout 180s >/dev/null
done

log "applying the samples"
for sample in etcd-cluster mysql-cluster redis-cluster mongodb-replicaset; do
  kubectl apply -f "samples/$sample.yaml" >/dev/null
done
# A Redis shard's primary and replica never share a node unless the deployment allows it, and the
# demo has one node: the sharded sample says so, as a user of a one-node cluster would.
log "applying samples/redis-cluster-sharded.yaml with spec.podTemplate.affinity: {} (one node: a shard's pods may share it)"
{ cat samples/redis-cluster-sharded.yaml; printf '  podTemplate:\n    affinity: {}\n'; } | kubectl apply -f - >/dev/null
ready() { # kind/name, engine
  if ! kubectl wait --for=condition=Ready "$1" --timeout=600s >/dev/null; then
    log "$1 not ready in time; its conditions, pods and the operator's log:"
    kubectl get "$1" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' >&2
    kubectl get pods -o wide >&2
    kubectl logs -n "quorum-$2" "deployment/quorum-$2-operator" --tail=30 >&2
    exit 1
  fi
}
ready etcdcluster/demo etcd
ready mysqlcluster/shop mysql
ready rediscluster/cache redis
ready rediscluster/sessions redis
ready mongodbreplicaset/orders mongodb
log "every sample Ready $(( $(date +%s) - started ))s after the control plane was up"

kubectl get nodes -o wide
echo
kubectl get pods -A -o wide
echo
kubectl get etcdclusters,mysqlclusters,redisclusters,mongodbreplicasets
echo
kubectl get etcdcluster demo -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.health}{"\n"}{end}'
kubectl get mysqlcluster shop -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.role}{"\t"}{.health}{"\n"}{end}'
kubectl get rediscluster sessions -o jsonpath='{range .status.nodes[*]}{.name}{"\tshard "}{.shard}{"\t"}{.role}{"\t"}{.slots}{"\n"}{end}'
kubectl get mongodbreplicaset orders -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.state}{"\t"}{.health}{"\n"}{end}'
echo
log "the members' pods are the MongoDB replica-set simulator's, not mongod (README: Real pods)"
log "try: $(e2e/cluster.sh env | tr '\n' ' ')"
log "     kubectl exec demo-0 -- etcdctl member list"
log "     kubectl logs shop-0 -c mysqld"
log "     kubectl delete pod shop-1; kubectl get mysqlcluster shop -w"
log "     kubectl scale etcdcluster demo --replicas=5; kubectl get etcdclusters -w"
log "     kubectl annotate mysqlcluster shop mysql.quorum.dev/switchover-to=shop-1"
log "     kubectl patch rediscluster sessions --type merge -p '{\"spec\":{\"shards\":4}}'"
log "     kubectl scale mongodbreplicaset orders --replicas=5"
log "day two (status, a switchover, a backup and a restore, a roll, pause): README.md, \"Day two\""
log "stop everything: make demo-stop"
