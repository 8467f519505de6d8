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
  # SIGINT for the local members: they stop their database processes on it.
  for name in etcd-local-members mysql-local-members redis-local-members mongodb-local-members etcd-operator mysql-operator redis-operator mongodb-operator; do
    if running "$name"; then
      case $name in *-local-members) kill -INT "$(cat "$demo/$name.pid")" ;; *) kill "$(cat "$demo/$name.pid")" ;; esac
      for _ in $(seq 50); do running "$name" || break; sleep 0.1; done
    fi
    rm -f "$demo/$name.pid"
  done
  e2e/cluster.sh stop
  rm -rf "$demo"
  exit 0
fi

e2e/setup.sh demo
e2e/cluster.sh start
eval "$(e2e/cluster.sh env)"
mkdir -p "$demo"
log "building the operators"
cargo build --quiet -p etcd-operator -p mysql-operator -p redis-operator -p mongodb-operator -p quorum-e2e --bins --examples
target=${CARGO_TARGET_DIR:-$root/target}

log "installing the CRDs"
kubectl apply --server-side --force-conflicts -f charts/quorum-etcd-operator/crds/ >/dev/null
kubectl apply --server-side --force-conflicts -f charts/quorum-mysql-operator/crds/ >/dev/null
kubectl apply --server-side --force-conflicts -f charts/quorum-redis-operator/crds/ >/dev/null
kubectl apply --server-side --force-conflicts -f charts/quorum-mongodb-operator/crds/ >/dev/null

log "starting the etcd operator (members on loopback addresses) and the local members"
launch etcd-operator "$target/debug/etcd-operator" --leader-elect=false \
  --metrics-address 127.0.0.1:18080 --member-addresses loopback
etcd_dir=$(e2e/toolchain/build.sh etcd)
launch etcd-local-members "$target/debug/examples/local_members" \
  --etcd "$etcd_dir/etcd" --state "$demo/members"

log "starting the MySQL operator (members on loopback addresses) and the local MariaDB members"
launch mysql-operator "$target/debug/mysql-operator" --leader-elect=false \
  --metrics-address 127.0.0.1:18081 --member-addresses loopback
launch mysql-local-members "$target/debug/examples/mysql_local_members" \
  --state "$demo/mysql-members"

log "starting the Redis operator (pods on loopback addresses) and the local redis-server processes"
launch redis-operator "$target/debug/redis-operator" --leader-elect=false \
  --metrics-address 127.0.0.1:18082 --member-addresses loopback
launch redis-local-members "$target/debug/examples/redis_local_members" \
  --state "$demo/redis-members"

log "starting the MongoDB operator (pods on loopback addresses) and the local members"
log "  (the replica-set simulator, which speaks MongoDB's wire protocol; QUORUM_MONGOD=<mongod> runs a real server)"
launch mongodb-operator "$target/debug/mongodb-operator" --leader-elect=false \
  --metrics-address 127.0.0.1:18083 --member-addresses loopback
launch mongodb-local-members "$target/debug/examples/mongodb_local_members" \
  --state "$demo/mongodb-members"

log "applying the samples"
kubectl apply -f samples/etcd-cluster.yaml >/dev/null
kubectl apply -f samples/mysql-cluster.yaml >/dev/null
kubectl apply -f samples/redis-cluster.yaml >/dev/null
kubectl apply -f samples/redis-cluster-sharded.yaml >/dev/null
kubectl apply -f samples/mongodb-replicaset.yaml >/dev/null
ready() { # kind/name, operator
  if ! kubectl wait --for=condition=Ready "$1" --timeout=300s >/dev/null; then
    log "$1 not ready in time; the $2's log:"
    tail -n 30 "$demo/$2.log" >&2
    exit 1
  fi
}
ready etcdcluster/demo etcd-operator
ready mysqlcluster/shop mysql-operator
ready rediscluster/cache redis-operator
ready rediscluster/sessions redis-operator
ready mongodbreplicaset/orders mongodb-operator

kubectl get etcdclusters
echo
kubectl get statefulsets,pods,services,poddisruptionbudgets -l app.kubernetes.io/instance=demo
echo
kubectl get etcdcluster demo -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.health}{"\tleader="}{.leader}{"\n"}{end}'
echo
kubectl get mysqlclusters
echo
kubectl get mysqlcluster shop -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.role}{"\t"}{.health}{"\n"}{end}'
echo
kubectl get redisclusters
echo
kubectl get rediscluster cache -o jsonpath='{range .status.nodes[*]}{.name}{"\t"}{.role}{"\t"}{.health}{"\n"}{end}'
echo
kubectl get rediscluster sessions -o jsonpath='{range .status.nodes[*]}{.name}{"\tshard "}{.shard}{"\t"}{.role}{"\t"}{.slots}{"\n"}{end}'
echo
kubectl get mongodbreplicasets
echo
kubectl get mongodbreplicaset orders -o jsonpath='{range .status.members[*]}{.name}{"\t"}{.state}{"\t"}{.health}{"\tvotes="}{.votes}{"\n"}{end}'
echo
log "try: kubectl scale etcdcluster demo --replicas=5; kubectl get etcdclusters -w"
log "try: kubectl scale mysqlcluster shop --replicas=4; kubectl get mysqlclusters -w"
log "     kubectl annotate mysqlcluster shop mysql.quorum.dev/switchover-to=shop-1"
log "     kubectl patch rediscluster cache --type merge -p '{\"spec\":{\"replicas\":3}}'"
log "     kubectl patch rediscluster sessions --type merge -p '{\"spec\":{\"shards\":4}}'"
log "     kubectl scale mongodbreplicaset orders --replicas=5"
log "metrics: curl -s 127.0.0.1:18080/metrics | grep quorum_ (etcd), 127.0.0.1:18081 (MySQL), 127.0.0.1:18082 (Redis), 127.0.0.1:18083 (MongoDB)"
log "stop everything: make demo-stop"
