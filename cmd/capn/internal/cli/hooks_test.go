package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// TestDescribeShowsHooks: a machine with hooks has a "Hooks:" line under
// it in capn describe's tree, with each hook and its holder, and, while
// its deletion waits for them, the reason and message of its condition.
func TestDescribeShowsHooks(t *testing.T) {
	c, ms := fixture(fixedNow)
	var held *capnv1.Machine
	for _, m := range ms {
		if m.GetSpec().GetPool() == "md-0" {
			held = m
			break
		}
	}
	held.Metadata.Annotations = map[string]string{
		annotations.PreTerminateHookPrefix + "backup": "velero",
		annotations.PreDrainHookPrefix + "audit":      "ci",
		"capn.dev/other":                              "not a hook",
	}
	held.Metadata.DeletionTimestamp = timestamppb.New(fixedNow)
	held.Status = &capnv1.MachineStatus{Phase: "Deleting", Conditions: []*capnv1.Condition{
		{Type: "PreDrainDeleteHookSucceeded", Status: "True"},
		{Type: "PreTerminateDeleteHookSucceeded", Status: "False", Reason: "WaitingExternalHook", Message: "waiting for hook backup (velero)"},
	}}
	var b strings.Builder
	describeCluster(&b, c, ms, nil, describeOpts{now: fixedNow, loc: time.UTC})
	lines := strings.Split(b.String(), "\n")
	var hooks []string
	for i, l := range lines {
		if strings.Contains(l, "Hooks:") {
			hooks = append(hooks, l)
			if !strings.Contains(lines[i-1], "Machine/"+held.GetMetadata().GetName()) {
				t.Errorf("the Hooks: line is not under its machine:\n%s\n%s", lines[i-1], l)
			}
		}
	}
	if len(hooks) != 1 {
		t.Fatalf("want one Hooks: line, got %d:\n%s", len(hooks), b.String())
	}
	for _, want := range []string{"WaitingExternalHook", "pre-drain/audit (ci), pre-terminate/backup (velero): waiting for hook backup (velero)"} {
		if !strings.Contains(hooks[0], want) {
			t.Errorf("Hooks: line %q lacks %q", hooks[0], want)
		}
	}
}

// TestHookAndDeleteMachineCommands runs capn hook and capn delete machine
// against a real capn dev (sim provider): add (again: unchanged; another
// holder: refused, naming the holder), list, describe, release (by
// another: refused; --force), the timeline, the refusal of the last
// control-plane machine, and delete machine --wait until its replacement
// runs.
func TestHookAndDeleteMachineCommands(t *testing.T) {
	a := newApplyTest(t)
	start := time.Now()
	code, _, stderr := a.run("", "apply", "-f", a.file("demo.yaml", clusterYAML("demo", 2)), "--wait", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("apply --wait: %d\n%s", code, stderr)
	}
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	c, err := client.New(a.dev.gatewayURL, client.WithToken(a.dev.token))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Machines(context.Background(), "demo", client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var worker, cp string
	for _, m := range ms {
		switch m.GetSpec().GetPool() {
		case "md-0":
			worker = m.GetMetadata().GetName()
		case "control-plane":
			cp = m.GetMetadata().GetName()
		}
	}

	code, stdout, stderr := a.run("", "hook", "add", "demo", worker, "--phase", "pre-terminate", "--name", "backup")
	a.want("hook add", code, stdout, stderr, 0, "machine/"+worker+" pre-terminate hook backup added by admin\n", "")
	code, stdout, stderr = a.run("", "hook", "add", "demo", "machine/"+worker, "--phase", "pre-terminate", "--name", "backup")
	a.want("hook add again", code, stdout, stderr, 0, "machine/"+worker+" pre-terminate hook backup already held by admin\n", "")
	code, stdout, stderr = a.run("", "hook", "add", "cluster/demo", worker, "--phase", "pre-terminate", "--name", "backup", "--holder", "velero")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "held by admin") {
		t.Errorf("hook add by another holder: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "hook", "add", "demo", worker, "--phase", "pre-drain", "--name", "Bad/Name")
	if code != 1 || !strings.Contains(stderr, "name: ") || !strings.Contains(stderr, "must be an annotation name") {
		t.Errorf("bad hook name: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = a.run("", "hook", "list", "demo")
	if code != 0 || !strings.Contains(stdout, "MACHINE") || !strings.Contains(stdout, worker) ||
		!strings.Contains(stdout, "pre-terminate") || !strings.Contains(stdout, "admin") || strings.Count(stdout, "\n") != 2 {
		t.Errorf("hook list: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = a.run("", "describe", "cluster", "demo")
	if code != 0 || !strings.Contains(stdout, "Hooks:") || !strings.Contains(stdout, "pre-terminate/backup (admin)") {
		t.Errorf("describe: exit %d\n%s", code, stdout)
	}

	code, stdout, stderr = a.run("", "hook", "release", "demo", worker, "--phase", "pre-terminate", "--name", "backup", "--holder", "velero")
	if code != 1 || !strings.Contains(stderr, "held by admin, not velero") {
		t.Errorf("release by another: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run("", "hook", "release", "demo", worker, "--phase", "pre-terminate", "--name", "backup", "--holder", "velero", "--force")
	a.want("release --force", code, stdout, stderr, 0, "machine/"+worker+" pre-terminate hook backup released (held by admin)\n", "")
	code, stdout, stderr = a.run("", "hook", "list", "demo")
	a.want("hook list, none", code, stdout, stderr, 0, "", "No hooks found.\n")
	code, stdout, stderr = a.run("", "events", "demo")
	if code != 0 || !strings.Contains(stdout, "HookAdded") || !strings.Contains(stdout, "HookReleased") ||
		!strings.Contains(stdout, "pre-terminate hook backup released by velero (held by admin, forced)") {
		t.Errorf("events: exit %d\n%s%s", code, stdout, stderr)
	}

	code, stdout, stderr = a.run("", "delete", "machine", cp, "--cluster", "demo")
	if code != 1 || !strings.Contains(stderr, "last control-plane machine") || !strings.Contains(stderr, "capn scale demo --pool control-plane") {
		t.Errorf("delete the last control-plane machine: exit %d\n%s%s", code, stdout, stderr)
	}

	began := time.Now()
	code, stdout, stderr = a.run("", "delete", "machine", worker, "--cluster", "demo", "--wait", "--timeout", "2m")
	t.Logf("delete machine --wait took %s\nstdout:\n%sstderr:\n%s", time.Since(began).Round(time.Millisecond), stdout, stderr)
	if code != 0 || !strings.Contains(stdout, "machine/"+worker+" deleted\n") || !strings.Contains(stdout, "replaces it: Running\n") ||
		!strings.Contains(stderr, "(replacement): ") {
		t.Fatalf("delete machine --wait: exit %d", code)
	}
	// The first line about the machine, unless it was gone at the first
	// look (sim deletes in well under a second): Deleting or Deleted, or,
	// if the machine-manager has not taken it up yet, its phase and that
	// its deletion is requested — never a phase that hides the deletion.
	if i := strings.Index(stderr, "machine/"+worker+": "); i >= 0 {
		if first, _, _ := strings.Cut(stderr[i:], "\n"); !strings.Contains(first, ": Deleting") && !strings.Contains(first, ": Deleted") && !strings.Contains(first, "deletion requested") {
			t.Errorf("first progress line of %s: %q", worker, first)
		}
	}
	code, stdout, stderr = a.run("", "delete", "machine", worker, "--cluster", "demo")
	if code != 1 || !strings.Contains(stderr, "not found") {
		t.Errorf("delete a deleted machine: exit %d\n%s%s", code, stdout, stderr)
	}
	testkit.WaitFor(t, time.Minute, "demo has 2 workers again", func() bool {
		ms, err := c.Machines(context.Background(), "demo", client.ListOptions{LabelSelector: "capn.dev/pool=md-0"})
		running := 0
		for _, m := range ms {
			if m.GetStatus().GetPhaseValue() == capnv1.MachineRunning && m.GetMetadata().GetDeletionTimestamp() == nil {
				running++
			}
		}
		return err == nil && running == 2
	})
}
