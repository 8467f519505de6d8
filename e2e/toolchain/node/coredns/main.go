// CoreDNS with only the plugins the local cluster needs: it answers cluster.local from the API
// server and NXDOMAIN for everything else. There is no forward plugin, so nothing leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	// The same relative order as CoreDNS's plugin.cfg.
	dnsserver.Directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "template", "kubernetes"}
}

func main() { coremain.Run() }
