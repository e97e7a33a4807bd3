package cli

import (
	"slices"
	"strings"
	"testing"
)

// TestParseRefs: TYPE [NAME...] and TYPE/NAME... (what -o name prints),
// one type at a time, and a precise error for anything else.
func TestParseRefs(t *testing.T) {
	tests := []struct {
		pos       []string
		wantRes   resource
		wantNames []string
		wantErr   string
	}{
		{pos: []string{"clusters"}, wantRes: resCluster},
		{pos: []string{"cl", "a", "b"}, wantRes: resCluster, wantNames: []string{"a", "b"}},
		{pos: []string{"cluster/demo"}, wantRes: resCluster, wantNames: []string{"demo"}},
		{pos: []string{"clusters/a", "cl/b"}, wantRes: resCluster, wantNames: []string{"a", "b"}},
		{pos: []string{"machine/demo-md-0-abc12-0"}, wantRes: resMachine, wantNames: []string{"demo-md-0-abc12-0"}},
		{pos: []string{"machines", "m-1"}, wantRes: resMachine, wantNames: []string{"m-1"}},
		{pos: []string{"clusterclasses"}, wantRes: resClass},
		{pos: []string{"clusterclass/standard", "cc/small"}, wantRes: resClass, wantNames: []string{"standard", "small"}},
		{pos: nil, wantErr: "missing what: clusters, machines, addonsets, clusterclasses, or TYPE/NAME"},
		{pos: []string{"pods"}, wantErr: `unknown type "pods": capn has clusters, machines, addonsets and clusterclasses`},
		{pos: []string{"pod/x"}, wantErr: `"pod/x": unknown type "pod": capn has clusters, machines, addonsets and clusterclasses (cluster/NAME, machine/NAME, addonset/NAME, clusterclass/NAME)`},
		{pos: []string{"cluster/"}, wantErr: `"cluster/": want TYPE/NAME, e.g. cluster/demo`},
		{pos: []string{"cluster/a/b"}, wantErr: `"cluster/a/b": want TYPE/NAME, e.g. cluster/demo`},
		{pos: []string{"cluster/a", "machine/b"}, wantErr: `"machine/b": one type at a time (cluster/... first)`},
		{pos: []string{"cluster", "cluster/a"}, wantErr: `"cluster/a": give either TYPE NAME... or TYPE/NAME..., not both`},
	}
	for _, tt := range tests {
		r, err := parseRefs(tt.pos)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("parseRefs(%q): %v, want %q", tt.pos, err, tt.wantErr)
			}
			continue
		}
		if err != nil || r.res != tt.wantRes || !slices.Equal(r.names, tt.wantNames) {
			t.Errorf("parseRefs(%q) = %v %q, %v", tt.pos, r.res, r.names, err)
		}
	}
}

// TestTypeSlashNameErrors: each command that takes a cluster takes
// cluster/NAME, and says precisely why another TYPE does not fit, before
// it looks for a gateway.
func TestTypeSlashNameErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"scale", "machine/m-1", "--pool", "md-0", "--replicas", "1"}, `capn scale: "machine/m-1" is a machine: capn scale takes a cluster (NAME or cluster/NAME)`},
		{[]string{"upgrade", "machines/m-1", "--version", "v1.34.0"}, `capn upgrade: "machines/m-1" is a machine: capn upgrade takes a cluster (NAME or cluster/NAME)`},
		{[]string{"pause", "pod/x"}, `capn pause: "pod/x": unknown type "pod": capn has clusters, machines, addonsets and clusterclasses (cluster/NAME, machine/NAME, addonset/NAME, clusterclass/NAME)`},
		{[]string{"kubeconfig", "machine/m-1"}, `capn kubeconfig: "machine/m-1" is a machine: capn kubeconfig takes a cluster (NAME or cluster/NAME)`},
		{[]string{"events", "machine/m-1"}, `capn events: "machine/m-1" is a machine: capn events takes a cluster (NAME or cluster/NAME)`},
		{[]string{"describe", "machine/m-1"}, `capn describe: cannot describe machines: capn describes clusters, their machines in the tree (capn get machine NAME -o yaml shows one)`},
		{[]string{"describe", "cluster/a", "cluster/b"}, `capn describe: unexpected argument "cluster/b": capn describes one cluster`},
		{[]string{"describe", "demo"}, `capn describe: cannot describe "demo": capn describes clusters (capn describe cluster demo)`},
		{[]string{"delete", "machine/m-1"}, `capn delete: --cluster is required: the cluster of machine m-1 (capn delete machine m-1 --cluster CLUSTER)`},
		{[]string{"delete", "machine", "m-1", "m-2", "--cluster", "demo"}, `capn delete: capn deletes one machine at a time (each is drained and replaced): got 2`},
		{[]string{"delete", "machine", "--cluster", "demo"}, `capn delete: missing the machine's NAME: capn delete machine NAME --cluster CLUSTER`},
		{[]string{"delete", "machine/m-1", "--cluster", "machine/x"}, `capn delete: "machine/x" is a machine: capn delete takes a cluster (NAME or cluster/NAME)`},
		{[]string{"delete", "cluster", "demo", "--cluster", "demo"}, `capn delete: --cluster goes with a machine: capn delete machine NAME --cluster CLUSTER`},
		{[]string{"hook", "add", "demo"}, `capn hook add: missing the MACHINE`},
		{[]string{"hook", "add", "demo", "m-1", "--name", "x"}, `capn hook add: --phase is required: pre-drain or pre-terminate`},
		{[]string{"hook", "add", "demo", "m-1", "--phase", "pre-delete", "--name", "x"}, `capn hook add: --phase: must be pre-drain or pre-terminate, got "pre-delete"`},
		{[]string{"hook", "release", "demo", "m-1", "--phase", "pre-drain"}, `capn hook release: --name is required: the hook's name`},
		{[]string{"hook", "release", "demo", "cluster/m-1", "--phase", "pre-drain", "--name", "x"}, `capn hook release: "cluster/m-1" is a cluster: capn hook release takes CLUSTER MACHINE`},
		{[]string{"hook", "list", "machine/m-1"}, `capn hook list: "machine/m-1" is a machine: capn hook list takes a cluster (NAME or cluster/NAME)`},
		{[]string{"hook", "hold"}, `capn hook: unknown action "hold": capn hook add|release|list`},
		{[]string{"hook"}, `capn hook: missing what to do: add, release, list`},
		{[]string{"delete", "demo"}, `capn delete: cannot delete "demo": capn deletes clusters (capn delete cluster demo)`},
		{[]string{"delete", "cluster"}, `capn delete: missing the clusters to delete: their names, or -l SELECTOR`},
		{[]string{"delete", "cluster/a", "-l", "env=dev"}, `capn delete: -l selects the clusters to delete: it cannot go with names`},
		{[]string{"delete", "clusters", "-l", "env in (dev"}, `capn delete: -l "env in (dev": `},
		{[]string{"get", "cluster/a", "-l", "env=dev"}, `capn get: -l selects from a list: it cannot go with a name`},
		{[]string{"get", "clusterclasses", "-w"}, `capn get: capn get clusterclasses lists the classes once: it takes no -w or -l`},
		{[]string{"delete", "clusterclass", "standard", "--wait"}, `capn delete: capn delete clusterclass NAME... takes no --cluster, -l, --wait or --orphan`},
		{[]string{"delete", "clusterclass"}, `capn delete: missing the cluster classes to delete: capn delete clusterclass NAME...`},
		{[]string{"describe", "clusterclass/standard"}, `capn describe: cannot describe clusterclasses: capn describes clusters`},
		{[]string{"get", "nodes"}, `capn get: unknown type "nodes": capn has clusters, machines, addonsets and clusterclasses`},
		{[]string{"upgrade", "demo", "--version", "bogus"}, `capn upgrade: --version: must be vMAJOR.MINOR.PATCH, e.g. v1.34.2, got "bogus"` + "\nSee 'capn upgrade -h' for help.\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			e, _, stderr := testEnv(nil)
			if code := run(t.Context(), e, tt.args); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.HasPrefix(stderr.String(), tt.want) {
				t.Errorf("stderr:\n%s\nwant it to start with:\n%s", stderr, tt.want)
			}
		})
	}
}
