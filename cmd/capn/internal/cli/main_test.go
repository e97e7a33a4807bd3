package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/capn-dev/capn/internal/testkit"
)

func testEnv(vars map[string]string) (env, *testkit.Buffer, *testkit.Buffer) {
	stdout, stderr := &testkit.Buffer{}, &testkit.Buffer{}
	return env{stdout: stdout, stderr: stderr, lookup: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}, stdout, stderr
}

func TestRunDispatches(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "no command", wantCode: 2, wantStderr: "usage: capn <command>"},
		{name: "help", args: []string{"help"}, wantCode: 0, wantStdout: "  dev         run NATS with JetStream"},
		{name: "--help", args: []string{"--help"}, wantCode: 0, wantStdout: "  version     print capn's version"},
		{name: "help of a command", args: []string{"help", "dev"}, wantCode: 0, wantStdout: "usage: capn dev [flags]"},
		{name: "help of an unknown command", args: []string{"help", "nope"}, wantCode: 2, wantStderr: `capn help: unknown command "nope"`},
		{name: "unknown command", args: []string{"nope"}, wantCode: 2, wantStderr: `capn: unknown command "nope"`},
		{name: "version", args: []string{"version"}, wantCode: 0, wantStdout: "capn "},
		{name: "dev with a bad flag", args: []string{"dev", "--bogus"}, wantCode: 2, wantStderr: "capn dev: unknown flag --bogus\nSee 'capn dev -h' for help.\n"},
		{name: "dev with an argument", args: []string{"dev", "now"}, wantCode: 2, wantStderr: `unexpected argument "now"`},
		{name: "dev reports every bad setting", args: []string{"dev", "--log-level", "loud", "--nats-listen", "4222"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --log-level (CAPN_LOG_LEVEL) "loud": must be one of trace|debug|info|warn|error` + "\n" +
				`  - --nats-listen (CAPN_NATS_LISTEN) "4222": must be host:port (port 0..65535) or "none"`},
		{name: "dev with unknown or repeated providers", args: []string{"dev", "--providers", "sim,aws,sim"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --providers (CAPN_PROVIDERS) "sim,aws,sim": unknown provider "aws": want some of sim, process, docker` + "\n" +
				`  - --providers (CAPN_PROVIDERS) "sim,aws,sim": provider "sim" is named twice`},
		{name: "dev with a kube-bin that is no directory", args: []string{"dev", "--kube-bin", "/nonexistent/kube/bin"}, wantCode: 2,
			wantStderr: "capn dev: invalid configuration:\n" +
				`  - --kube-bin (CAPN_KUBE_BIN) "/nonexistent/kube/bin": must be the directory of the Kubernetes binaries`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, stdout, stderr := testEnv(nil)
			if code := run(context.Background(), e, tt.args); code != tt.wantCode {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantStdout, stdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, stderr)
			}
		})
	}
}

// TestFlagMistakes: a flag mistake is one line naming the flag and one
// pointing at the command's -h, on stderr, exit 2: never Go's "flag
// provided but not defined: -bogus" followed by the whole help.
func TestFlagMistakes(t *testing.T) {
	tests := []struct {
		args []string
		want string // all of stderr
	}{
		{[]string{"get", "clusters", "--bogus"}, "capn get: unknown flag --bogus\nSee 'capn get -h' for help.\n"},
		{[]string{"get", "-bogus", "clusters"}, "capn get: unknown flag --bogus\n"},
		{[]string{"get", "clusters", "-x"}, "capn get: unknown flag -x\n"},
		{[]string{"get", "clusters", "-o"}, "capn get: -o: needs a value\nSee 'capn get -h' for help.\n"},
		{[]string{"get", "clusters", "--watch=maybe"}, `capn get: --watch: must be true or false, got "maybe"` + "\n"},
		{[]string{"get", "clusters", "---o"}, `capn get: bad flag syntax "---o": a flag is -x, --name or --name=value` + "\n"},
		{[]string{"scale", "demo", "--replicas", "many"}, `capn scale: --replicas: must be a whole number, got "many"` + "\nSee 'capn scale -h' for help.\n"},
		{[]string{"scale", "demo", "--pool", "md-0", "--replicas=-5"}, "capn scale: --replicas: must be 0 or more, got -5\nSee 'capn scale -h' for help.\n"},
		{[]string{"scale", "demo", "--pool", "md-0"}, "capn scale: --replicas is required: the number of machines wanted, 0 or more\n"},
		{[]string{"scale", "demo", "--pool", "md-0", "--replicas", "2000000"}, "capn scale: --replicas: must be at most 1048576, got 2000000\n"},
		{[]string{"apply", "-f", "x", "--timeout", "soon"}, `capn apply: --timeout: must be a duration such as 30s, 5m or 1h30m, got "soon"` + "\n"},
		{[]string{"delete", "cluster", "demo", "--wait=2"}, `capn delete: --wait: must be true or false, got "2"` + "\n"},
		{[]string{"describe", "cluster", "demo", "-A"}, "capn describe: -A: capn has no namespaces; only the commands that list (capn get) accept -A, and ignore it\nSee 'capn describe -h' for help.\n"},
		{[]string{"scale", "demo", "--all-namespaces"}, "capn scale: --all-namespaces: capn has no namespaces; only the commands that list (capn get) accept -A, and ignore it\n"},
		{[]string{"events", "demo", "--limit", "x"}, `capn events: --limit: must be a whole number, got "x"` + "\n"},
		{[]string{"version", "--short"}, "capn version: unknown flag --short\nSee 'capn version -h' for help.\n"},
		{[]string{"version", "now"}, `capn version: unexpected argument "now"` + "\n"},
		{[]string{"dev", "--log-level"}, "capn dev: --log-level: needs a value\nSee 'capn dev -h' for help.\n"},
		{[]string{"nats-config", "render", "--bogus"}, "capn-nats-config render: unknown flag --bogus\nSee 'capn-nats-config render -h' for help.\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			e, stdout, stderr := testEnv(nil)
			if code := run(context.Background(), e, tt.args); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if stdout.String() != "" {
				t.Errorf("stdout:\n%s", stdout)
			}
			if got := stderr.String(); !strings.HasPrefix(got, tt.want) || strings.Count(got, "\n") != 2 {
				t.Errorf("stderr:\n%s\nwant it to start with, in two lines:\n%s", got, tt.want)
			}
		})
	}
}

// TestEveryCommandsHelp: -h and --help print the command's help on stdout
// and exit 0, for every command (capn dev and capn nats-config too), and no
// help shows a sentinel default such as "(default -1)".
func TestEveryCommandsHelp(t *testing.T) {
	sentinel := regexp.MustCompile(`\(default -\d`)
	var cmds [][]string
	for _, c := range commands() {
		cmds = append(cmds, []string{c.name})
	}
	cmds = append(cmds, []string{"hook", "add"}, []string{"hook", "release"}, []string{"hook", "list"}, []string{"nats-config", "render"}, []string{"nats-config", "provision"}, []string{"nats-config", "users"})
	for _, c := range cmds {
		for _, h := range []string{"-h", "--help"} {
			t.Run(strings.Join(c, " ")+" "+h, func(t *testing.T) {
				e, stdout, stderr := testEnv(nil)
				if code := run(context.Background(), e, append(c, h)); code != 0 {
					t.Errorf("exit code %d, want 0", code)
				}
				if out := strings.ToLower(stdout.String()); !strings.HasPrefix(out, "usage") && !strings.HasPrefix(out, "capn") {
					t.Errorf("stdout is not the help:\n%s", stdout)
				}
				if stderr.String() != "" {
					t.Errorf("stderr:\n%s", stderr)
				}
				if sentinel.MatchString(stdout.String()) {
					t.Errorf("the help shows a sentinel default:\n%s", stdout)
				}
			})
		}
	}
}
