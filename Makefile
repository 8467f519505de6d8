# The two entry points for a fresh machine; everything else is in e2e/.
.PHONY: demo demo-stop test bench fresh-check generate cluster-start cluster-stop

demo:
	e2e/demo.sh

demo-stop:
	e2e/demo.sh stop

test:
	e2e/test.sh

# Quorum's etcd operator against etcd-io/etcd-operator on the real node: figures, ratios and
# targets, raw numbers under bench/results/. QUICK=1: the smallest size, as CI runs it.
bench:
	e2e/bench.sh $(if $(QUICK),--quick) $(BENCH_ARGS)

# The README's setup and a cold workspace build in a clean Debian root file system: proves the
# setup installs every prerequisite, whatever this machine already has.
fresh-check:
	e2e/fresh-check.sh

generate:
	cargo xtask generate

cluster-start:
	e2e/setup.sh demo && e2e/cluster.sh start

cluster-stop:
	e2e/cluster.sh stop
