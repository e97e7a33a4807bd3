package cli

import (
	"context"

	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigcmd"
)

// cmdNATSConfig is capn-nats-config inside capn: render a deployment's NATS
// (a 3-node JetStream cluster's configuration, one least-privilege nkey user
// per component, TLS certificates, env files, the secrets key and the
// gateway's admin token), provision its streams and buckets, or print its
// users' permissions. Same commands and flags as cmd/capn-nats-config.
func cmdNATSConfig(ctx context.Context, e env, args []string) int {
	return natsconfigcmd.Run(ctx, args, e.stdout, e.stderr)
}
