// Command controlplane-hosted runs capn's hosted control planes on their
// own: a cluster's etcd and Kubernetes components as supervised processes
// on the management side. See services/controlplane-hosted.
package main

import (
	controlplanehosted "github.com/capn-dev/capn/services/controlplane-hosted"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(controlplanehosted.New(controlplanehosted.Config{})) }
