// Command bootstrapper runs capn's bootstrapper service on its own: cluster
// PKI, admin kubeconfigs and per-machine bootstrap data. See
// services/bootstrapper.
package main

import (
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(bootstrapper.New(bootstrapper.Config{})) }
