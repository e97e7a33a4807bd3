package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/capn-dev/capn/cmd/capn/internal/dev"
	"github.com/capn-dev/capn/services/daemon"
)

func cmdDev(ctx context.Context, e env, args []string) int {
	cfg := dev.DefaultConfig()
	fs := flag.NewFlagSet("capn dev", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	daemon.BindFlags(fs, cfg.Flags()...)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, "usage: capn dev [flags]\n\n")
		fmt.Fprint(w, "Runs a NATS server with JetStream and every capn service in this process, each\n")
		fmt.Fprint(w, "service with its own in-process connection, and the gateway's API with an admin\n")
		fmt.Fprint(w, "token (kept in <data-dir>/admin.token). It writes a client config for the capn CLI\n")
		fmt.Fprint(w, "to <data-dir>/client.yaml and, unless it points at another gateway, to\n")
		fmt.Fprint(w, "${XDG_CONFIG_HOME:-~/.config}/capn/config.yaml. State persists in the data directory.\n")
		fmt.Fprint(w, "Ctrl-C stops it. Each flag not given is read from the variable in brackets.\n\n")
		fs.PrintDefaults()
	}
	pos, err := parseCommandLine(e, fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, "capn dev", nil, err)
	}
	if err := errors.Join(daemon.ApplyFlagEnv(fs, e.lookup, cfg.Flags()...), cfg.Validate()); err != nil {
		daemon.PrintProblems(e.stderr, "capn dev", err)
		return daemon.ExitUsage
	}
	cfg.Extra = extraDevServices
	if err := dev.Run(ctx, cfg, e.stderr, e.lookup); err != nil {
		fmt.Fprintf(e.stderr, "capn dev: %v\n", err)
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

// extraDevServices run after capn dev's own; tests add theirs here to
// prove the wiring. It is empty in the binary.
var extraDevServices []daemon.Service
