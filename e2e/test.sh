#!/usr/bin/env bash
# Every test: formatting, lints, generated-file drift, unit tests, and the integration tests
# against the real local control plane and its real node (started here, stopped on exit).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
log() { printf '[test %(%T)T] %s\n' -1 "$*" >&2; }
# Marks each line of its input with NAME and the time it was printed, so a slow test or phase
# can be found in the log.
mark() {
  local name=$1 line
  while IFS= read -r line; do printf '[%s %(%T)T] %s\n' "$name" -1 "$line"; done
}
# Waits for the background job PID, prints its output file with each line marked [NAME], and
# returns the job's status.
collect() {
  local name=$1 pid=$2 output=$3 status=0
  wait "$pid" || status=$?
  sed "s/^/[$name] /" "$output" >&2
  rm -f "$output"
  return "$status"
}

e2e/setup.sh system
# The Go-built tools go beside the checks below: on a cold machine each leaves the processors
# idle part of the time (module downloads, linking), and warm both are quick.
tools_log=$(mktemp)
# A process group of its own, so that a check failing below stops the Go builds with it.
setsid e2e/setup.sh tools >"$tools_log" 2>&1 &
tools=$!
trap 'kill -- -"$tools" 2>/dev/null || true' EXIT
log "the Go-built tools (control plane, node, packaging), building beside the checks: $tools_log"
log "cargo fmt --check"
cargo fmt --all --check
log "cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
log "generated files"
cargo xtask check
if ! collect tools "$tools" "$tools_log"; then
  log "building the Go-built tools failed"
  exit 1
fi

e2e/cluster.sh start
trap 'e2e/cluster.sh stop' EXIT
log "operator images, imported into the real node"
e2e/images.sh import operators
log "the previous release's MySQL operator (the operator upgrade test starts there), built and imported"
e2e/images.sh import previous
log "the benchmark's baseline operator (etcd-io/etcd-operator), built and imported"
e2e/images.sh import peer >/dev/null
QUORUM_PEER_DIR=$(e2e/toolchain/build.sh peer)
export QUORUM_PEER_DIR
log "cargo test: building every test, and the benchmark"
cargo test --workspace --no-run --quiet
cargo build --quiet -p quorum-bench
# The integration tests wait on pods, servers and the API server far more than they compute, so
# two shards run at once, each package's binaries in turn, lines marked with their shard. Tests
# that need the machine to themselves take a lock (OLM, whose operators use fixed ports); tests
# that count an operator's API requests count them at its own client.
shard() {
  local name=$1
  shift
  cargo test --no-fail-fast "$@" 2>&1 | mark "$name"
  return "${PIPESTATUS[0]}"
}
# The fresh-machine check (the setup in a clean bookworm root, then `cargo check` of the
# workspace there) goes beside the shards, at the lowest priority: on a new machine it is twenty
# minutes of compiling, and the shards mostly wait on pods; unchanged since it passed, it is
# skipped at once.
fresh_log=$(mktemp)
setsid nice -n 19 ionice -c 3 e2e/fresh-check.sh check >"$fresh_log" 2>&1 &
fresh=$!
trap 'kill -- -"$fresh" 2>/dev/null || true; e2e/cluster.sh stop' EXIT
log "fresh-machine check, beside the shards: $fresh_log"
log "cargo test: two shards at once"
shard redis+mongodb -p redis-operator -p mongodb-operator -p xtask &
first=$!
# The second shard ends with the benchmark at its smallest size (what `make bench QUICK=1` runs,
# on this control plane and these images), which fails only when an invariant breaks, never on
# a figure.
the_rest_and_the_quick_bench() {
  local failed=0
  shard the-rest --workspace --exclude redis-operator --exclude mongodb-operator --exclude xtask || failed=1
  cargo run --quiet -p quorum-bench -- --quick 2>&1 | mark bench || failed=1
  return "$failed"
}
the_rest_and_the_quick_bench &
second=$!
failed=0
wait "$first" || failed=1
wait "$second" || failed=1
if ! collect fresh "$fresh" "$fresh_log"; then
  log "the fresh-machine check failed: the setup leaves something the build needs missing"
  failed=1
fi
if ((failed)); then
  log "cargo test: a shard failed (search this log for 'FAILED' and 'panicked')"
  exit 1
fi
