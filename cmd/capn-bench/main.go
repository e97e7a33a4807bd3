// Command capn-bench measures capn at fleet scale against the NATS limit of
// the same machine, in the same run: first the baseline (KV puts of the
// same value size, JetStream async publishes) on a fresh embedded server,
// then capn's own figure on another fresh server, several runs each,
// reported as medians with their ratio. `make bench` runs it and writes
// docs/benchmarks.md.
//
// The benchmarks are package bench (cmd/capn-bench/internal/bench).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/capn-dev/capn/cmd/capn-bench/internal/bench"
)

func main() {
	cfg := bench.BindFlags(flag.CommandLine)
	flag.Parse()
	if err := bench.Run(context.Background(), *cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "capn-bench: %v\n", err)
		os.Exit(bench.ExitCode(err))
	}
}
