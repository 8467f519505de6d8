#!/usr/bin/env bash
# The local control plane: a real etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler, one real node (kubelet, kube-proxy, containerd and runc, CNI bridge, CoreDNS, a
# volume provisioner: e2e/real-node.sh) where pods are real containers, and KWOK playing kubelet for
# a few fake nodes (QUORUM_NODES, default 3) for tests that need many pods and no process behind them.
#
#   e2e/cluster.sh start    build what is missing, start everything, wait for health (idempotent)
#   e2e/cluster.sh stop     stop everything and remove the cluster's data (idempotent)
#   e2e/cluster.sh status   exit 0 when the API server answers /readyz
#   e2e/cluster.sh env      print `export KUBECONFIG=...; export PATH=...` for a shell to eval
#
# State lives in QUORUM_CLUSTER_DIR (default ~/.cache/quorum/cluster); the kubeconfig is
# $QUORUM_CLUSTER_DIR/kubeconfig.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${QUORUM_CLUSTER_DIR:-${QUORUM_CACHE:-$HOME/.cache/quorum}/cluster}
pki="$dir/pki"
logs="$dir/logs"
run="$dir/run"
etcd_client_port=${QUORUM_ETCD_PORT:-23379}
apiserver_port=${QUORUM_APISERVER_PORT:-26443}
nodes=${QUORUM_NODES:-3}
# Each claim a test makes on the KWOK nodes takes one pre-made volume for the life of the control
# plane (a released one is not bound again): a full `make test` takes about 300, and each
# replication-mode Redis deployment three more for its Sentinels.
volumes=${QUORUM_VOLUMES:-800}

log() { echo "[cluster] $*" >&2; }

# shellcheck source=real-node.sh
source "$here/real-node.sh"

bin_dirs() {
  etcd_bin=$("$here/toolchain/build.sh" etcd)
  kwok_bin=$("$here/toolchain/build.sh" kwok)
  k8s_bin=$("$here/toolchain/build.sh" k8s)
}

kubectl_() { "$k8s_bin/kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

# A CA, a serving certificate for the API server (rustls refuses a self-signed CA used as
# the serving certificate, so they are separate), one admin client certificate and the
# service-account signing key.
make_pki() {
  [[ -f "$pki/admin.crt" ]] && return
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=quorum-local-ca" 2>/dev/null
    cat > serving.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:$real_node_ip,IP:$kubernetes_service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EXT
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
      -days 3650 -extfile serving.ext 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > client.ext
    openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin" 2>/dev/null
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt \
      -days 3650 -extfile client.ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  cat > "$dir/kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: quorum-local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: quorum-local
  context: {cluster: quorum-local, user: admin, namespace: default}
current-context: quorum-local
KUBECONFIG
}

running() { [[ -f "$run/$1.pid" ]] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

launch() {
  local name=$1; shift
  running "$name" && return
  nohup "$@" > "$logs/$name.log" 2>&1 &
  echo $! > "$run/$name.pid"
}

wait_for() {
  local what=$1 seconds=$2; shift 2
  for _ in $(seq "$seconds"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  log "$what did not become healthy in ${seconds}s; last log lines:"
  tail -n 30 "$logs/$what.log" >&2 || true
  return 1
}

apiserver_ready() { kubectl_ get --raw /readyz; }

start() {
  bin_dirs
  mkdir -p "$logs" "$run"
  real_node_preflight
  make_pki
  real_node_pki
  real_node_network
  launch etcd "$etcd_bin/etcd" --name quorum-local --data-dir "$dir/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$etcd_client_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_client_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_client_port + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_client_port + 1))" \
    --initial-cluster "quorum-local=http://127.0.0.1:$((etcd_client_port + 1))" \
    --listen-metrics-urls "http://127.0.0.1:$((etcd_client_port + 2))" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$((etcd_client_port + 2))/health"

  # The benchmark counts its operators' requests by verb from this audit log: only the service
  # accounts of its fixed namespaces are recorded (one per Quorum engine, and the peer's;
  # bench/), nothing else.
  cat > "$dir/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups:
      - system:serviceaccounts:quorum-bench-etcd
      - system:serviceaccounts:quorum-bench-mysql
      - system:serviceaccounts:quorum-bench-redis
      - system:serviceaccounts:quorum-bench-mongodb
      - system:serviceaccounts:etcd-operator-system
  - level: None
POLICY
  # Host processes use 127.0.0.1; pods reach it through the kubernetes Service, whose endpoint is
  # the node's address on the bridge.
  launch kube-apiserver "$k8s_bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_client_port" \
    --bind-address 0.0.0.0 --advertise-address "$real_node_ip" --secure-port "$apiserver_port" \
    --service-cluster-ip-range "$service_cidr" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,PodNodeSelector,PodTolerationRestriction \
    --kubelet-client-certificate "$pki/kubelet-client.crt" --kubelet-client-key "$pki/kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --cert-dir "$pki" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --allow-privileged=true \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$logs/audit.log" \
    --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --profiling=false
  wait_for kube-apiserver 120 apiserver_ready

  # KWOK posts node status without leases, at intervals that reach the default 50s grace period
  # on a loaded machine; the node lifecycle controller then marks every pod on the node NotReady
  # and KWOK never makes them Ready again. Fake nodes do not fail: a long grace period.
  launch kube-controller-manager "$k8s_bin/kube-controller-manager" \
    --kubeconfig "$dir/kubeconfig" --authentication-kubeconfig "$dir/kubeconfig" \
    --authorization-kubeconfig "$dir/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --use-service-account-credentials=false --leader-elect=false --pvclaimbinder-sync-period 1s \
    --controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route' \
    --node-monitor-grace-period 10m \
    --profiling=false
  launch kube-scheduler "$k8s_bin/kube-scheduler" \
    --kubeconfig "$dir/kubeconfig" --authentication-kubeconfig "$dir/kubeconfig" \
    --authorization-kubeconfig "$dir/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false --profiling=false
  launch kwok "$kwok_bin/kwok" --kubeconfig "$dir/kubeconfig" --config "$here/kwok-stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr "$kwok_pod_cidr" --node-ip 10.240.0.1 --server-address 127.0.0.1:0

  for i in $(seq 1 "$nodes"); do
    kubectl_ apply -f - >/dev/null <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: zone-$i
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
NODE
  done
  wait_for kwok 60 nodes_ready
  ((nodes > 0)) && make_volume_pool
  # The default ServiceAccount is created by the controller-manager; pods need it.
  wait_for kube-controller-manager 60 kubectl_ get serviceaccount default -n default
  real_node_start
  log "ready: export KUBECONFIG=$dir/kubeconfig"
}

# No storage provisioner runs here, so claims bind to a pool of pre-made volumes (the
# controller-manager's binder does the binding). Pods on KWOK nodes never touch the path.
make_volume_pool() {
  kubectl_ get pv quorum-pool-0 >/dev/null 2>&1 && return
  for i in $(seq 0 $((volumes - 1))); do
    cat <<PV
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: quorum-pool-$i
  labels: {quorum.dev/pool: local}
spec:
  capacity: {storage: 100Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /var/lib/quorum-pool/$i}
PV
  done | kubectl_ apply -f - >/dev/null
}

nodes_ready() {
  local ready
  ready=$(kubectl_ get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [[ "$ready" -ge "$nodes" ]]
}

stop_process() {
  local name=$1
  if running "$name"; then
    kill "$(cat "$run/$name.pid")" 2>/dev/null || true
    for _ in $(seq 20); do running "$name" || break; sleep 0.5; done
    running "$name" && kill -9 "$(cat "$run/$name.pid")" 2>/dev/null || true
  fi
  rm -f "$run/$name.pid"
}

stop() {
  # Only what is built already: stopping never builds.
  k8s_bin="${QUORUM_CACHE:-$HOME/.cache/quorum}/bin/k8s-$(sed -n 's/^K8S_VERSION=//p' "$here/toolchain/versions.env")"
  real_node_stop
  for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_process "$name"; done
  rm -rf "$dir/etcd-data" "$pki" "$dir/kubeconfig"
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) bin_dirs; apiserver_ready >/dev/null ;;
  env) bin_dirs; echo "export KUBECONFIG=$dir/kubeconfig; export PATH=$k8s_bin:\$PATH" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
