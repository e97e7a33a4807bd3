// Command capn is capn's command-line tool: kubectl-shaped commands
// (apply, get, describe, scale, upgrade, delete, ...) that talk to the
// gateway's API through gateway/client, `capn import` for Cluster API
// manifests, `capn dev`, which runs an embedded NATS server, every capn
// service and the gateway on one machine, and `capn nats-config`, which
// renders the NATS side of a deployment on a JetStream cluster
// (docker-compose.yaml). docs/cli.md is the reference.
//
// main only wires signals and the exit code: the commands are package
// cli (cmd/capn/internal/cli).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/capn-dev/capn/cmd/capn/internal/cli"
	"github.com/capn-dev/capn/services/daemon"
)

// version is the release, set at build time with
// -ldflags "-X main.version=v0.1.0"; else the module version.
var version = ""

func main() {
	daemon.PreciseTimestamps()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the default action again: a second Ctrl-C kills at once
	}()
	code := cli.Main(ctx, version, os.Args[1:])
	stop()
	os.Exit(code)
}
