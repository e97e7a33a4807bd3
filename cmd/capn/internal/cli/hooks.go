package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/services/daemon"
)

const hookHelp = `
Lifecycle hooks let another system hold a machine's deletion, as Cluster
API's pre-drain and pre-terminate delete hooks do: while a machine has a
pre-drain hook, its deletion waits before its Node is drained; while it
has a pre-terminate hook, after the drain, before its infrastructure is
deleted. The holder releases the hook when its work is done (a backup,
a storage detach, an audit).

  capn hook add CLUSTER MACHINE --phase pre-drain|pre-terminate --name NAME [--holder WHO]
  capn hook release CLUSTER MACHINE --phase pre-drain|pre-terminate --name NAME [--holder WHO] [--force]
  capn hook list CLUSTER

The holder is the gateway token's name unless --holder says otherwise.
Adding a hook its holder already holds changes nothing; one held by
another holder is refused, naming it. Only the holder releases a hook,
unless --force.

Examples:
  capn hook add demo demo-md-0-7f9c2-x8k2p --phase pre-terminate --name backup --holder velero
  capn hook list demo
  capn hook release demo demo-md-0-7f9c2-x8k2p --phase pre-terminate --name backup --holder velero
`

// hookSubcommands are capn hook's verbs.
var hookSubcommands = []string{"add", "release", "list"}

func cmdHook(ctx context.Context, e env, args []string) int {
	if len(args) == 0 {
		return reportError(e.stderr, "capn hook", nil, usagef("missing what to do: %s", strings.Join(hookSubcommands, ", ")))
	}
	switch args[0] {
	case "add":
		return cmdHookChange(ctx, e, args[1:], true)
	case "release":
		return cmdHookChange(ctx, e, args[1:], false)
	case "list":
		return cmdHookList(ctx, e, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(e.stdout, "usage: capn hook add|release|list ...\n\n%s\n", strings.TrimSpace(hookHelp))
		return daemon.ExitOK
	}
	return reportError(e.stderr, "capn hook", nil, usagef("unknown action %q: capn hook %s", args[0], strings.Join(hookSubcommands, "|")))
}

// cmdHookChange is capn hook add and capn hook release.
func cmdHookChange(ctx context.Context, e env, args []string, add bool) int {
	verb, synopsis := "release", "capn hook release CLUSTER MACHINE --phase PHASE --name NAME [--holder WHO] [--force]"
	if add {
		verb, synopsis = "add", "capn hook add CLUSTER MACHINE --phase PHASE --name NAME [--holder WHO]"
	}
	name := "capn hook " + verb
	fs := newFlags(e, synopsis, hookHelp)
	var a apiFlags
	a.bind(fs)
	var phase, hook, holder string
	var force bool
	fs.StringVar(&phase, "phase", "", "when the hook holds a deleting machine: `pre-drain` or pre-terminate (required)")
	fs.StringVar(&hook, "name", "", "the hook's `name`, unique per machine and phase (required)")
	fs.StringVar(&holder, "holder", "", "`who` holds the hook (default: the gateway token's name)")
	if !add {
		fs.BoolVar(&force, "force", false, "release the hook whoever holds it")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, machine, err := clusterAndMachine(pos, name)
	switch {
	case err != nil:
	case phase == "":
		err = usagef("--phase is required: %s", strings.Join(api.HookPhases, " or "))
	case !slices.Contains(api.HookPhases, phase):
		err = usagef("--phase: must be %s, got %q", strings.Join(api.HookPhases, " or "), phase)
	case hook == "":
		err = usagef("--name is required: the hook's name")
	}
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if add {
		h, added, err := s.c.AddHook(ctx, cluster, machine, api.HookRequest{Phase: phase, Name: hook, Holder: holder})
		if err != nil {
			return s.fail(err)
		}
		what := "added"
		if !added {
			what = "already held"
		}
		fmt.Fprintf(e.stdout, "machine/%s %s hook %s %s by %s\n", machine, phase, hook, what, h.Holder)
		return daemon.ExitOK
	}
	h, err := s.c.ReleaseHook(ctx, cluster, machine, phase, hook, client.ReleaseOptions{Holder: holder, Force: force})
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "machine/%s %s hook %s released (held by %s)\n", machine, phase, hook, h.Holder)
	return daemon.ExitOK
}

func cmdHookList(ctx context.Context, e env, args []string) int {
	const name = "capn hook list"
	fs := newFlags(e, "capn hook list CLUSTER", hookHelp)
	var a apiFlags
	a.bind(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := oneCluster(pos, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	hs, err := s.c.Hooks(ctx, cluster)
	if err != nil {
		return s.fail(err)
	}
	writeHooks(e.stdout, e.stderr, hs)
	return daemon.ExitOK
}

// writeHooks prints hooks as a table, or says there are none (on stderr,
// as kubectl does).
func writeHooks(stdout, stderr io.Writer, hs []api.Hook) {
	if len(hs) == 0 {
		fmt.Fprintln(stderr, "No hooks found.")
		return
	}
	rows := [][]string{{"MACHINE", "PHASE", "NAME", "HOLDER", "HOLDING", "MACHINE PHASE"}}
	for _, h := range hs {
		holding := "no"
		if h.Holding {
			holding = "yes"
		}
		rows = append(rows, []string{h.Machine, h.Phase, h.Name, h.Holder, holding, orNone(h.MachinePhase)})
	}
	writeTable(stdout, rows)
}

// clusterAndMachine reads CLUSTER MACHINE (cluster/NAME and machine/NAME
// are accepted too).
func clusterAndMachine(pos []string, cmd string) (cluster, machine string, err error) {
	if err := wantArgs(pos, "the CLUSTER", "the MACHINE"); err != nil {
		return "", "", err
	}
	if cluster, err = clusterArg(pos[0], cmd); err != nil {
		return "", "", err
	}
	machine = pos[1]
	if strings.Contains(machine, "/") {
		res, n, err := splitRef(machine)
		if err != nil {
			return "", "", err
		}
		if res != resMachine {
			return "", "", usagef("%q is a %s: %s takes CLUSTER MACHINE", machine, res.singular, cmd)
		}
		machine = n
	}
	return cluster, machine, nil
}

// machineHooks is the "Hooks:" line capn describe shows under a machine
// that has lifecycle hooks: each hook as phase/name (holder), and, when
// the machine's deletion waits for them, the reason and the message of
// its hook condition. Nil when the machine has none.
func machineHooks(m *capnv1.Machine) *treeNode {
	ann := m.GetMetadata().GetAnnotations()
	var list []string
	reason, msg := "", ""
	for _, phase := range api.HookPhases {
		prefix, cond := annotations.PreDrainHookPrefix, "PreDrainDeleteHookSucceeded"
		if phase == api.HookPreTerminate {
			prefix, cond = annotations.PreTerminateHookPrefix, "PreTerminateDeleteHookSucceeded"
		}
		names := annotations.Hooks(ann, prefix)
		for _, n := range names {
			list = append(list, phase+"/"+n+" ("+ann[prefix+n]+")")
		}
		if c := conditions.Get(m.GetStatus().GetConditions(), cond); len(names) > 0 && c.GetStatusValue() == capnv1.ConditionFalse {
			reason, msg = c.GetReason(), c.GetMessage()
		}
	}
	if len(list) == 0 {
		return nil
	}
	if msg == "" {
		msg = strings.Join(list, ", ")
	} else {
		msg = strings.Join(list, ", ") + ": " + msg
	}
	return &treeNode{name: "Hooks:", cells: []string{"", "", "", reason, "", msg}}
}
