package bench

import (
	"errors"
	"flag"
	"slices"
	"testing"
)

// TestOptions: the flags' defaults parse, and a mistake is a usage error
// (exit 2) in capn-bench's words.
func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "": parses
	}{
		{name: "defaults"},
		{name: "a size that is no number", args: []string{"--clusters", "100,x"}, wantErr: `--clusters: "x" is not a positive number`},
		{name: "an idle size of 0", args: []string{"--idle-clusters", "0"}, wantErr: `--idle-clusters: "0" is not a positive number`},
		{name: "an unknown benchmark", args: []string{"--bench", "fleet,nope"}, wantErr: `--bench: "nope" is not a benchmark (fleet, repair, idle, upgrade, ingest, rollout, hosted, replicated, large)`},
		{name: "a replicated size of 0", args: []string{"--replicated-clusters", "100,0"}, wantErr: `--replicated-clusters: "0" is not a positive number`},
		{name: "4 replicated nodes", args: []string{"--replicated-nodes", "4"}, wantErr: `--replicated-nodes: 4: the rendered deployment has 1 to 3 nodes`},
		{name: "a large fleet of 0", args: []string{"--large-clusters", "0"}, wantErr: `--large-clusters: 0 is not a positive number`},
		{name: "a large reference of -1", args: []string{"--large-reference", "-1"}, wantErr: `--large-reference: -1 is not a positive number`},
		{name: "a large timeout of 0", args: []string{"--large-timeout", "0s"}, wantErr: `--large-timeout: 0s is not a positive duration`},
		{name: "a hosted size of 0", args: []string{"--hosted", "3,0"}, wantErr: `--hosted: "0" is neither a positive number nor auto`},
		{name: "a hosted size that is no number", args: []string{"--hosted", "many"}, wantErr: `--hosted: "many" is neither a positive number nor auto`},
		{name: "a hosted window of 0", args: []string{"--hosted-window", "0s"}, wantErr: `--hosted-window: 0s is not a positive duration`},
		{name: "a rollout fleet of 0", args: []string{"--rollout-clusters", "0"}, wantErr: `--rollout-clusters: 0 is not a positive number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("capn-bench", flag.ContinueOnError)
			cfg := BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			o, err := cfg.options()
			if tt.wantErr == "" {
				// Every benchmark but hosted (make bench-hosted), replicated
				// and large (make bench-large) by default.
				if err != nil || !slices.Equal(o.sizes, []int{100, 300, 1000}) || !slices.Equal(o.idleSizes, []int{100, 1000}) ||
					len(o.want) != len(benchmarks)-3 || o.want["hosted"] || o.want["replicated"] || o.want["large"] ||
					!slices.Equal(o.hostedSizes, []int{0}) || !slices.Equal(o.replicatedSizes, []int{100, 1000}) ||
					o.ReplicatedNodes != 3 || o.LargeClusters != 10000 || o.LargeReference != 1000 {
					t.Errorf("options() = %+v, %v", o, err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || ExitCode(err) != 2 {
				t.Errorf("options() error %v (exit %d), want %q (exit 2)", err, ExitCode(err), tt.wantErr)
			}
		})
	}
	fs := flag.NewFlagSet("capn-bench", flag.ContinueOnError)
	cfg := BindFlags(fs)
	if err := fs.Parse([]string{"--bench", "hosted", "--hosted", "3, auto,15"}); err != nil {
		t.Fatal(err)
	}
	if o, err := cfg.options(); err != nil || !o.want["hosted"] || len(o.want) != 1 || !slices.Equal(o.hostedSizes, []int{3, 0, 15}) {
		t.Errorf("--bench hosted --hosted 3,auto,15: want %v, sizes %v, %v", o.want, o.hostedSizes, err)
	}
	if code := ExitCode(errors.New("a run failed")); code != 1 {
		t.Errorf("ExitCode of a failure = %d, want 1", code)
	}
}
