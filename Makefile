# The two entry points for a fresh machine; everything else is in e2e/.
.PHONY: demo demo-stop test generate cluster-start cluster-stop

demo:
	e2e/demo.sh

demo-stop:
	e2e/demo.sh stop

test:
	e2e/test.sh

generate:
	cargo xtask generate

cluster-start:
	e2e/setup.sh && e2e/cluster.sh start

cluster-stop:
	e2e/cluster.sh stop
