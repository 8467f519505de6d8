# The local control plane's real node, sourced by e2e/cluster.sh: a kubelet and kube-proxy built from
# the same Kubernetes module as the API server, Debian's containerd and runc, the CNI bridge, CoreDNS
# serving cluster.local only, and a dynamic volume provisioner. Pods on it are real containers from
# locally built images (e2e/images.sh).
#
# The network exists only inside this machine: the bridge quorum0 holds the node address, pods get
# 10.244.0.0/24 with no default route and no masquerade, the service network 10.96.0.0/16 is routed
# onto the bridge, and DNS answers cluster.local and nothing else.
#
# An OCI registry (distribution's `registry`) listens on 127.0.0.1:5000 with nothing in it, and
# containerd pulls the images of ghcr.io and quay.io from there (its registry hosts: a mirror
# per registry, plain HTTP on loopback): what is pushed there is what a pod pulls, as from the
# real registry, and nothing is ever fetched from outside. Images imported into containerd are
# used as they are (IfNotPresent finds them).
#
# The node is tainted quorum.dev/real-node=true:NoSchedule while KWOK nodes exist, so only pods that
# ask for it (a toleration, and a node selector on type=real) run real containers; without KWOK nodes
# (the demo) it takes every pod and local-path is the default storage class.
#
# Expects from cluster.sh: $dir, $pki, $logs, $run, $k8s_bin, $nodes, launch, running, wait_for,
# kubectl_, log.

real_node_name=quorum-node
real_node_bridge=quorum0
real_node_ip=10.244.0.1
real_node_pod_cidr=10.244.0.0/24
# KWOK's fake pods take addresses from here; nothing answers there, and an unreachable route keeps
# anything sent to them on this machine.
kwok_pod_cidr=10.244.128.0/17
service_cidr=10.96.0.0/16
kubernetes_service_ip=10.96.0.1
cluster_dns_ip=10.96.0.10
node_dir="$dir/node"
containerd_socket="$node_dir/containerd/containerd.sock"
real_node_taint=quorum.dev/real-node
registry_address=127.0.0.1:5000
# The registries whose images are pulled from the local one (OLM's images are quay.io's, ours
# ghcr.io's).
mirrored_registries=(ghcr.io quay.io)

# Stops `cluster.sh start` with one line naming what is missing.
real_node_preflight() {
  local problem=""
  [[ $(id -u) -eq 0 ]] || problem="the real node needs root (network devices, mounts, cgroups)"
  local command
  for command in containerd containerd-shim-runc-v2 ctr runc iptables ip conntrack umoci; do
    [[ -n $problem ]] && break
    command -v "$command" >/dev/null || problem="$command is not installed: run e2e/setup.sh"
  done
  [[ -n $problem || -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] \
    || problem="the CNI plugins are not installed (/usr/lib/cni): run e2e/setup.sh"
  [[ -n $problem ]] || grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null \
    || problem="the kernel has no overlay file system (containerd's snapshotter needs it)"
  [[ -n $problem || -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] \
    || problem="no memory cgroup under /sys/fs/cgroup (the kubelet needs cgroups)"
  if [[ -z $problem && ! -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    modprobe br_netfilter 2>/dev/null || true
    [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] \
      || problem="the kernel has no br_netfilter (kube-proxy cannot route Service traffic between pods)"
  fi
  if [[ -z $problem ]] && ! ip link show "$real_node_bridge" >/dev/null 2>&1; then
    ip link add quorum-probe0 type bridge 2>/dev/null && ip link del quorum-probe0 \
      || problem="cannot create a bridge network device (ip link add type bridge)"
  fi
  if [[ -z $problem ]] && ! running kubelet; then
    local port
    for port in 10250 10248 10249 10256 ${registry_address##*:}; do
      if [[ -n $(ss -Hltn "sport = :$port") ]]; then problem="port $port is in use (the kubelet, kube-proxy or the registry needs it)"; break; fi
    done
  fi
  if [[ -n $problem ]]; then
    log "cannot start the real node: $problem"
    return 1
  fi
}

real_node_network() {
  # What the kubelet, kube-proxy and the bridge plugin change, restored by real_node_stop.
  [[ -f $dir/sysctl-before.txt ]] || sysctl vm.overcommit_memory kernel.panic kernel.panic_on_oops \
    net.ipv4.ip_forward net.ipv4.conf.all.route_localnet net.bridge.bridge-nf-call-iptables \
    > "$dir/sysctl-before.txt" 2>/dev/null || true
  if ! ip link show "$real_node_bridge" >/dev/null 2>&1; then
    ip link add "$real_node_bridge" type bridge
    ip addr add "$real_node_ip/24" dev "$real_node_bridge"
  fi
  ip link set "$real_node_bridge" up
  ip route replace "$service_cidr" dev "$real_node_bridge" src "$real_node_ip"
  ip route replace unreachable "$kwok_pod_cidr"
  sysctl -q -w net.bridge.bridge-nf-call-iptables=1
}

# Client certificates and kubeconfigs for the kubelet (the Node authorizer's system:node:NAME), for
# kube-proxy, and for the API server's calls to the kubelet (logs, exec, port-forward).
real_node_pki() {
  [[ -f $pki/kube-proxy.kubeconfig ]] && return
  (
    cd "$pki"
    local file subject
    for file in node kube-proxy kubelet-client; do
      case $file in
        node) subject="/O=system:nodes/CN=system:node:$real_node_name" ;;
        kube-proxy) subject="/CN=system:kube-proxy" ;;
        kubelet-client) subject="/O=system:masters/CN=kube-apiserver-kubelet-client" ;;
      esac
      openssl req -newkey rsa:2048 -nodes -keyout "$file.key" -out "$file.csr" -subj "$subject" 2>/dev/null
      openssl x509 -req -in "$file.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$file.crt" \
        -days 3650 -extfile client.ext 2>/dev/null
    done
  )
  local user
  for user in node kube-proxy; do
    sed -e "s#$pki/admin.crt#$pki/$user.crt#" -e "s#$pki/admin.key#$pki/$user.key#" \
      "$dir/kubeconfig" > "$pki/$user.kubeconfig"
  done
}

real_node_configs() {
  local pause_image
  pause_image=$("$here/images.sh" references | tr ' ' '\n' | sed -n 's/^PAUSE_IMAGE=//p')
  mkdir -p "$node_dir"/{containerd,kubelet,cni/net.d,cni/ipam,local-path}
  cat > "$node_dir/containerd/config.toml" <<TOML
version = 2
root = "$node_dir/containerd/root"
state = "$node_dir/containerd/state"
[grpc]
  address = "$containerd_socket"
[ttrpc]
  address = "$containerd_socket.ttrpc"
[debug]
  address = "$node_dir/containerd/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  disable_apparmor = true
  # This machine's root lacks CAP_SYS_RESOURCE: the kubelet's -998 oom_score_adj for the sandbox
  # would make runc fail every pod. Clamp it to containerd's own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node_dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$node_dir/containerd/certs.d"
TOML
  local registry
  for registry in "${mirrored_registries[@]}"; do
    mkdir -p "$node_dir/containerd/certs.d/$registry"
    cat > "$node_dir/containerd/certs.d/$registry/hosts.toml" <<TOML
server = "https://$registry"
[host."http://$registry_address"]
  capabilities = ["pull", "resolve"]
TOML
  done
  mkdir -p "$node_dir/registry/storage"
  cat > "$node_dir/registry/config.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $node_dir/registry/storage}
  delete: {enabled: true}
http:
  addr: $registry_address
YAML
  cat > "$node_dir/cni/net.d/10-quorum.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "quorum",
  "plugins": [
    {
      "type": "bridge", "bridge": "$real_node_bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$real_node_pod_cidr", "gateway": "$real_node_ip"}]],
        "routes": [{"dst": "$service_cidr"}],
        "dataDir": "$node_dir/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  local taints=""
  ((nodes > 0)) && taints="registerWithTaints: [{key: $real_node_taint, value: \"true\", effect: NoSchedule}]"
  cat > "$node_dir/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $real_node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$containerd_socket
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$cluster_dns_ip]
clusterDomain: cluster.local
# No host resolver in pods: nothing but cluster.local resolves, and nothing is forwarded.
resolvConf: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Every image on this node was imported, none can be pulled: disk-pressure eviction, which
# reclaims space by deleting unused images (the pause image among them), would leave the node
# unable to start any pod. The disk is shared with other work, so its free space says nothing
# about this node; "0%" turns a signal off.
evictionHard: {memory.available: "100Mi", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%", imagefs.inodesFree: "0%"}
serializeImagePulls: false
rotateCertificates: false
maxPods: 110
$taints
YAML
  cat > "$node_dir/kube-proxy-config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $pki/kube-proxy.kubeconfig}
hostnameOverride: $real_node_name
bindAddress: $real_node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $real_node_pod_cidr
mode: iptables
nodePortAddresses: [$real_node_ip/32]
# Leave the host's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

real_node_ready() {
  [[ $(kubectl_ get node "$real_node_name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# Starts containerd, imports the node's images, starts the kubelet and kube-proxy, then CoreDNS and
# the volume provisioner, and waits until DNS answers.
real_node_start() {
  real_node_configs
  local registry_bin
  registry_bin=$("$here/toolchain/packaging.sh" registry)
  # No trace exporter: it would only try to reach a collector that does not exist.
  OTEL_TRACES_EXPORTER=none launch registry "$registry_bin/registry" serve "$node_dir/registry/config.yml"
  launch containerd containerd --config "$node_dir/containerd/config.toml"
  wait_for containerd 30 ctr --address "$containerd_socket" version
  wait_for registry 30 curl -fsS "http://$registry_address/v2/"
  QUORUM_CONTAINERD_SOCKET=$containerd_socket "$here/images.sh" import node
  QUORUM_CONTAINERD_SOCKET=$containerd_socket "$here/images.sh" import engines

  local labels="type=real,kubernetes.io/os=linux,topology.kubernetes.io/zone=zone-real"
  launch kubelet "$k8s_bin/kubelet" --config "$node_dir/kubelet-config.yaml" \
    --kubeconfig "$pki/node.kubeconfig" --hostname-override "$real_node_name" --node-ip "$real_node_ip" \
    --node-labels "$labels" --root-dir "$node_dir/kubelet" --cert-dir "$node_dir/kubelet/pki"
  launch kube-proxy "$k8s_bin/kube-proxy" --config "$node_dir/kube-proxy-config.yaml"
  wait_for kubelet 120 real_node_ready

  local toleration="[{key: $real_node_taint, operator: Exists, effect: NoSchedule}]"
  local default_class=false
  ((nodes > 0)) || default_class=true
  local PAUSE_IMAGE COREDNS_IMAGE LOCAL_PATH_IMAGE HELPER_IMAGE ETCD_IMAGE
  eval "$("$here/images.sh" references | tr ' ' '\n' | sed 's/^/local /')"
  sed -e "s#@TOLERATIONS@#$toleration#g" -e "s#@CLUSTER_DNS_IP@#$cluster_dns_ip#g" \
    -e "s#@COREDNS_IMAGE@#$COREDNS_IMAGE#g" -e "s#@LOCAL_PATH_IMAGE@#$LOCAL_PATH_IMAGE#g" \
    -e "s#@HELPER_IMAGE@#$HELPER_IMAGE#g" \
    -e "s#@LOCAL_PATH_DIR@#$node_dir/local-path#g" -e "s#@DEFAULT_CLASS@#$default_class#g" \
    "$here/real-node/system.yaml" | kubectl_ apply -f - >/dev/null
  wait_for kubelet 120 kubectl_ -n kube-system rollout status deployment/coredns --timeout=5s
  wait_for kubelet 120 kubectl_ -n local-path-storage rollout status deployment/local-path-provisioner --timeout=5s
}

# Stops the node and undoes what it did to the host: containers, mounts, network namespaces, the
# bridge and routes, the packet-filter chains, the sysctls. Best effort, every step: a subshell
# without errexit, so one step finding nothing to undo never skips the next.
real_node_stop() (
  set +e +o pipefail
  stop_process kube-proxy
  [[ -x ${k8s_bin:-}/kube-proxy ]] && "$k8s_bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
  stop_process kubelet
  if running containerd; then
    local ctr_=(ctr --address "$containerd_socket" -n k8s.io) task container
    for task in $("${ctr_[@]}" tasks ls -q 2>/dev/null); do "${ctr_[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1 || true; done
    for _ in $(seq 20); do
      [[ -z $("${ctr_[@]}" tasks ls 2>/dev/null | awk 'NR>1 && $3 != "STOPPED"') ]] && break
      sleep 0.5
    done
    for task in $("${ctr_[@]}" tasks ls -q 2>/dev/null); do "${ctr_[@]}" tasks delete -f "$task" >/dev/null 2>&1 || true; done
    for container in $("${ctr_[@]}" containers ls -q 2>/dev/null); do "${ctr_[@]}" containers rm "$container" >/dev/null 2>&1 || true; done
  fi
  stop_process containerd
  stop_process registry
  # Shims whose containerd is gone (their socket lives under the node's state).
  pkill -9 -f "containerd-shim-runc-v2 .*-address $containerd_socket" 2>/dev/null || true
  local mount
  grep -E " $node_dir/| /run/netns/cni-" /proc/mounts | awk '{print $2}' | sort -r | while read -r mount; do
    umount -l "$mount" 2>/dev/null || true
  done
  rm -f /run/netns/cni-* 2>/dev/null || true
  ip link del "$real_node_bridge" 2>/dev/null || true
  ip route del "$service_cidr" 2>/dev/null || true
  ip route del unreachable "$kwok_pod_cidr" 2>/dev/null || true
  local filter table chain rule chains
  for filter in iptables ip6tables; do
    for table in filter nat mangle; do
      chains=$("$filter" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/{print $2}')
      # Jumps from the built-in chains first: a chain still referenced cannot be deleted.
      for chain in $chains; do
        "$filter" -t "$table" -S | grep -E -- "-j $chain( |$)" | grep -v '^-A KUBE-' | sed 's/^-A/-D/' \
          | while read -r rule; do eval "$filter" -t "$table" "$rule" 2>/dev/null || true; done
      done
      for chain in $chains; do "$filter" -t "$table" -F "$chain" 2>/dev/null || true; done
      for chain in $chains; do "$filter" -t "$table" -X "$chain" 2>/dev/null || true; done
    done
  done
  if [[ -f $dir/sysctl-before.txt ]]; then
    local key value
    while read -r key _ value; do sysctl -q -w "$key=$value" 2>/dev/null || true; done < "$dir/sysctl-before.txt"
    rm -f "$dir/sysctl-before.txt"
  fi
  rm -rf "$node_dir"
)
