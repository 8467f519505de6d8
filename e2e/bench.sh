#!/usr/bin/env bash
# `make bench`: Quorum's etcd operator against etcd-io/etcd-operator (built from ../shared/peers)
# on the local control plane and its real node, with a table of figures and ratios printed and the
# raw numbers written under bench/results/.
#
#   e2e/bench.sh [--quick] [--clusters N] [--idle-seconds S]
#
# Starts the control plane when it is not running (and stops it after), imports the images it
# needs, and builds the operators' images optimized unless --quick (the figures compare a
# release build with the peer's release build; --quick only checks that the bench runs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { echo "[bench] $*" >&2; }

e2e/setup.sh demo
if ! e2e/cluster.sh status >/dev/null 2>&1; then
  e2e/cluster.sh start
  trap 'e2e/cluster.sh stop' EXIT
fi
quick=0
engines=""
previous=""
for argument in "$@"; do
  [[ $argument == --quick ]] && quick=1
  [[ $previous == --engines ]] && engines+=",$argument"
  [[ $argument == --engines=* ]] && engines+=",${argument#--engines=}"
  previous=$argument
done
# Only the operators of the engines measured are built (an optimized build takes minutes each).
if [[ -n $engines ]]; then
  QUORUM_OPERATORS=$(tr ',' '\n' <<<"${engines#,}" | sed -n 's/^\(etcd\|mysql\|redis\|mongodb\)$/\1-operator/p' | tr '\n' ' ')
  export QUORUM_OPERATORS
fi
e2e/images.sh import node >/dev/null
e2e/images.sh import engines >/dev/null
if ((quick)); then
  e2e/images.sh import operators >/dev/null
else
  QUORUM_OPERATOR_PROFILE=release e2e/images.sh import operators >/dev/null
fi
e2e/images.sh import peer >/dev/null
QUORUM_PEER_DIR=$(e2e/toolchain/build.sh peer)
export QUORUM_PEER_DIR
log "running (the table follows; progress on stderr)"
cargo run --quiet -p quorum-bench -- "$@"
