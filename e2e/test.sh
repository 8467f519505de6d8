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
log "cargo test: building every test, and the benchmark"
cargo test --workspace --no-run --quiet
cargo build --quiet -p quorum-bench
# The generator and the simulator as the test build linked them (beside the tests that run
# them): `cargo xtask` or `cargo build -p quorum-e2e` alone would compile the workspace's crates
# again, with only their own features (e2e/images.sh takes them from here too).
QUORUM_WORKSPACE_BINARIES=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug
export QUORUM_WORKSPACE_BINARIES
log "generated files"
"$QUORUM_WORKSPACE_BINARIES/xtask" check
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
# The integration tests wait on pods, servers and the API server far more than they compute, so
# four shards run at once, lines marked with their shard. Tests that need the machine to
# themselves take a lock (OLM, whose operators use fixed ports); tests that count an operator's
# API requests count them at its own client. The real-node tests (each operator's
# tests/real_pods.rs) are the longest binaries by far: they are spread over the shards so that
# each ends at about the same time.
metadata=$(mktemp)
cargo metadata --no-deps --format-version 1 >"$metadata"
# Cargo enables a dependency's features by the packages it is asked to build: `-p PACKAGE`
# alone would build the workspace's crates again with fewer features than the build above, and
# link every test a second time. The benchmark depends on every other package, so with it
# selected beside PACKAGE the features are the workspace's and the build above is reused.
same_features=(-p quorum-bench)
# The arguments selecting every test of package $1 but its real-node ones: its library, its
# binaries and its other test targets, each by name (the benchmark selected beside it must add
# none of its own).
without_real_node() {
  python3 - "$metadata" "$1" <<'PY'
import json, sys
metadata, wanted = sys.argv[1], sys.argv[2]
package = next(p for p in json.load(open(metadata))["packages"] if p["name"] == wanted)
arguments = ["-p", wanted]
for target in package["targets"]:
    if "lib" in target["kind"]:
        arguments.append("--lib")
    elif "bin" in target["kind"]:
        arguments += ["--bin", target["name"]]
    elif "test" in target["kind"] and target["name"] != "real_pods":
        arguments += ["--test", target["name"]]
print(" ".join(arguments))
PY
}
# One step of a shard: `tests:PACKAGE`, every test of PACKAGE but its real-node ones;
# `real:PACKAGE`, its real-node tests; `doc`, every doctest; `bench:ENGINES`, the benchmark of
# ENGINES (etcd with its peer) at its smallest size, as `make bench QUICK=1` runs it, which
# fails only when an invariant breaks, never on a figure (each engine's operator and clusters in
# a namespace of their own, so two such steps share the node).
step() {
  case $1 in
    tests:*) cargo test --no-fail-fast "${same_features[@]}" $(without_real_node "${1#tests:}") ;;
    real:*) cargo test --no-fail-fast "${same_features[@]}" -p "${1#real:}" --test real_pods ;;
    doc) cargo test --no-fail-fast --workspace --doc ;;
    bench:*) cargo run --quiet -p quorum-bench -- --quick --engines "${1#bench:}" ;;
  esac
}
# shard NAME STEP...: runs each step in turn, all of them even after one failed; fails when
# one did.
# Each step's outcome and duration, and every failed test's name and panic, also go to
# $outcomes, printed again at the end so the tail of the log says what failed and where time went.
outcomes=$(mktemp)
# The lines of a marked test output that name a failed test, each panic with its message, and
# the error a program (the benchmark) ended with, with the causes listed under it.
failures() {
  awk '
    causes && /\] (Caused by:|    .*)?$/ { print; next }
    { causes = 0 }
    /\] test .* \.\.\. FAILED$/ || / panicked at / || /\] Error: / {
      print
      if (/ panicked at /) { getline; print }
      if (/\] Error: /) causes = 1
    }'
}
shard() {
  local name=$1 each failed=0 started
  shift
  for each in "$@"; do
    started=$SECONDS
    if step "$each" 2>&1 | mark "$name" | tee >(failures >>"$outcomes"); then
      printf '[%s] %s passed in %d s\n' "$name" "$each" $((SECONDS - started)) >>"$outcomes"
    else
      printf '[%s] %s FAILED in %d s\n' "$name" "$each" $((SECONDS - started)) >>"$outcomes"
      failed=1
    fi
  done
  return "$failed"
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
# The shards are balanced by the steps' durations in earlier runs, with at most two real-node
# suites at once beside the benchmark: three at once load the one kubelet so that each suite
# takes longer and probes run late. The quick benchmark mostly waits (clusters settling, kills
# recovering): it is split in two, etcd with its peer and the other engines, in two shards.
first=(real:redis-operator real:mongodb-operator tests:etcd-operator tests:quorum-e2e)
second=(real:etcd-operator tests:redis-operator tests:kubectl-quorum doc tests:quorum-core)
third=(bench:mysql,redis,mongodb real:mysql-operator tests:xtask tests:quorum-bench)
fourth=(tests:mysql-operator bench:etcd tests:mongodb-operator)
# Every package's tests, every real-node test binary and every engine's benchmark are in a
# shard.
python3 - "$metadata" "${first[@]}" "${second[@]}" "${third[@]}" "${fourth[@]}" <<'PY'
import json, sys
packages = json.load(open(sys.argv[1]))["packages"]
steps = set(sys.argv[2:])
missing = [f"tests:{p['name']}" for p in packages] + [
    f"real:{p['name']}" for p in packages if any(t["name"] == "real_pods" for t in p["targets"])
]
missing = [step for step in missing if step not in steps]
benched = {e for step in steps if step.startswith("bench:") for e in step[6:].split(",")}
missing += [f"bench:{e}" for e in ("etcd", "mysql", "redis", "mongodb") if e not in benched]
sys.exit(f"e2e/test.sh: no shard runs {', '.join(missing)}" if missing else 0)
PY
log "cargo test: four shards at once"
shard shard-1 "${first[@]}" &
first_pid=$!
shard shard-2 "${second[@]}" &
second_pid=$!
shard shard-3 "${third[@]}" &
third_pid=$!
shard shard-4 "${fourth[@]}" &
fourth_pid=$!
failed=0
wait "$first_pid" || failed=1
wait "$second_pid" || failed=1
wait "$third_pid" || failed=1
wait "$fourth_pid" || failed=1
if ! collect fresh "$fresh" "$fresh_log"; then
  log "the fresh-machine check failed: the setup leaves something the build needs missing"
  failed=1
fi
# The steps first and the failed tests last: a reader of the log's tail sees what failed.
log "cargo test: each step"
grep -E '^\[shard-[0-9]+\] [^ ]+ (passed|FAILED) in [0-9]+ s$' "$outcomes" >&2 || true
log "cargo test: every failed test, with its panic"
grep -vE '^\[shard-[0-9]+\] [^ ]+ (passed|FAILED) in [0-9]+ s$' "$outcomes" >&2 || true
if ((failed)); then
  log "cargo test: a shard failed (search this log for 'FAILED' and 'panicked')"
  exit 1
fi
