package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of Main.
const (
	ExitOK     = 0
	ExitFailed = 1 // the service failed or did not stop in time
	ExitUsage  = 2 // bad flags, environment or configuration
)

// Main is the whole main function of a standalone service program
// (cmd/<service>/main.go): it reads the runtime's flags and the service's
// own (FlagProvider), fills what was not given from CAPN_* variables,
// validates everything (Config.Validate and the service's Validator) and
// prints every problem at once, runs the service with Run until SIGINT or
// SIGTERM (a second signal kills at once), and exits: 0 after a clean
// stop, 1 when the service failed, 2 for bad configuration.
func Main(svc Service) {
	os.Exit(MainArgs(context.Background(), svc, os.Args[1:], os.LookupEnv, os.Stderr))
}

// MainArgs is Main with its inputs given, returning the exit code; tests
// and programs with subcommands use it.
func MainArgs(ctx context.Context, svc Service, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	PreciseTimestamps()
	name := svc.Name()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := Config{Name: name}
	cfg.RegisterFlags(fs)
	var own []Flag
	if fp, ok := svc.(FlagProvider); ok {
		own = fp.Flags()
		BindFlags(fs, own...)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\n", name)
		fmt.Fprintf(stderr, "Each flag not given is read from the environment variable in brackets.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (see -h)\n", name, fs.Arg(0))
		return ExitUsage
	}
	errs := []error{cfg.ApplyEnv(lookup), ApplyFlagEnv(fs, lookup, own...), cfg.Validate()}
	if v, ok := svc.(Validator); ok {
		errs = append(errs, v.Validate())
	}
	if err := errors.Join(errs...); err != nil {
		PrintProblems(stderr, name, err)
		return ExitUsage
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the default action again: a second signal kills
	}()
	log := NewLogger(cfg, stderr)
	if err := Run(ctx, cfg, svc, WithLogger(log)); err != nil {
		log.Error().Err(err).Str("service", name).Msg("exiting")
		return ExitFailed
	}
	return ExitOK
}

// PrintProblems prints every error joined in err (errors.Join, nested or
// not) on a line of its own under "<name>: invalid configuration:".
func PrintProblems(w io.Writer, name string, err error) {
	fmt.Fprintf(w, "%s: invalid configuration:\n", name)
	for _, p := range Problems(err) {
		fmt.Fprintf(w, "  - %s\n", p)
	}
}

// Problems flattens errors joined with errors.Join into their messages.
func Problems(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}
