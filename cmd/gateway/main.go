// Command gateway runs capn's gateway on its own: the HTTP API for the CLI
// and the dashboard, CloudEvents ingest, and kubeconfigs. See gateway/ and
// docs/api.md.
package main

import (
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/services/daemon"
)

func main() { daemon.Main(gateway.New(gateway.Options{})) }
