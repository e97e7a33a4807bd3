// Command capn-nats-config renders capn's NATS deployment — the nats-server
// configuration of a 3-node JetStream cluster, one least-privilege nkey user
// per component, TLS certificates, env files — and provisions its streams
// and buckets (the compose init job). See deploy/natsconfig/natsconfigcmd.
//
//	capn-nats-config render [--out deploy/local] [--provider name[:trait,...]]...
//	capn-nats-config provision [runtime NATS flags] [--timeout 5m]
//	capn-nats-config users
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := natsconfigcmd.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
