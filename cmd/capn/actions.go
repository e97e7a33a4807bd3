package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/runtime"
)

const scaleHelp = `
Sets the number of machines of a worker pool, or of the control plane
with --pool control-plane (1, 3, 5 or 7 machines: etcd needs an odd
number).
A worker pool may go to 0. With --wait, waits until the cluster is ready
again.

Examples:
  capn scale demo --pool md-0 --replicas 5
  capn scale demo --pool control-plane --replicas 3 --wait
`

func cmdScale(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn scale NAME --pool POOL --replicas N [--wait]", scaleHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "the cluster is ready at the new size")
	var pool string
	replicas := -1
	fs.StringVar(&pool, "pool", "", "worker `pool` to scale, or control-plane")
	fs.IntVar(&replicas, "replicas", -1, "the `number` of machines wanted")
	const name = "capn scale"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	switch {
	case wantArgs(pos, "the cluster's NAME") != nil:
		return reportError(e.stderr, name, nil, wantArgs(pos, "the cluster's NAME"))
	case pool == "":
		return reportError(e.stderr, name, nil, usagef("--pool is required: a worker pool's name, or %s", api.ControlPlanePool))
	case replicas < 0:
		return reportError(e.stderr, name, nil, usagef("--replicas is required: 0 or more"))
	case replicas > 1<<20:
		return reportError(e.stderr, name, nil, usagef("--replicas %d: too many", replicas))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := s.c.Scale(ctx, pos[0], pool, int32(replicas))
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "cluster/%s scaled: %s to %d replicas\n", pos[0], poolWord(pool), replicas)
	return s.finish(ctx, c, wf)
}

func poolWord(pool string) string {
	if pool == api.ControlPlanePool {
		return "the control plane"
	}
	return "pool " + pool
}

const upgradeHelp = `
Sets the cluster's Kubernetes version: the control plane rolls first, one
machine at a time, then every worker pool that ran the control plane's
old version, within its maxSurge and maxUnavailable. The control plane
moves one minor version at a time and never down.

With --wait, waits until every machine runs the new version and the
cluster is ready.

Examples:
  capn upgrade demo --version v1.34.2 --wait
`

func cmdUpgrade(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn upgrade NAME --version VERSION [--wait]", upgradeHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "every machine runs the new version and the cluster is ready")
	var version string
	fs.StringVar(&version, "version", "", "the Kubernetes `version`, e.g. v1.34.2")
	const name = "capn upgrade"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos, "the cluster's NAME"); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if version == "" {
		return reportError(e.stderr, name, nil, usagef("--version is required, e.g. v1.34.2"))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := s.c.Upgrade(ctx, pos[0], version)
	if err != nil {
		return s.fail(err)
	}
	var following, pinned []string
	for _, p := range c.GetSpec().GetWorkerPools() {
		if p.GetVersion() == version {
			following = append(following, p.GetName())
		} else {
			pinned = append(pinned, p.GetName()+" ("+p.GetVersion()+")")
		}
	}
	msg := fmt.Sprintf("cluster/%s upgrading to %s: the control plane", pos[0], version)
	if len(following) > 0 {
		msg += ", then pools " + strings.Join(following, ", ")
	}
	if len(pinned) > 0 {
		msg += "; pools keeping their version: " + strings.Join(pinned, ", ")
	}
	fmt.Fprintln(e.stdout, msg)
	return s.finish(ctx, c, wf)
}

// finish waits for a changed cluster to be ready when --wait asks.
func (s *session) finish(ctx context.Context, c *capnv1.Cluster, wf waitFlags) int {
	if !wf.wait {
		return runtime.ExitOK
	}
	if err := s.waitFor(ctx, c.GetMetadata().GetName(), untilReady, c.GetMetadata().GetGeneration(), wf.timeout); err != nil {
		return s.fail(err)
	}
	return runtime.ExitOK
}

const pauseHelp = `
Pause stops every capn service from acting on the cluster (its deletion
included) until it is resumed; its machines keep running. Resume undoes
it.
`

func cmdPause(ctx context.Context, e env, args []string) int {
	return flagAction(ctx, e, args, "pause", "paused", pauseHelp, (*client.Client).Pause, nil)
}

func cmdResume(ctx context.Context, e env, args []string) int {
	return flagAction(ctx, e, args, "resume", "resumed", pauseHelp, (*client.Client).Resume, nil)
}

const hibernateHelp = `
Hibernate stops every machine of the cluster whose provider can stop
(stop-start): the same machines keep their identity and disks, and capn
creates or deletes none until the cluster wakes. Wake starts them again.
A pool whose provider cannot stop keeps running (capn describe says so).

With --wait, hibernate waits until every machine that can stop is
stopped; wake waits until the cluster is ready again.

Examples:
  capn hibernate demo --wait
  capn wake demo --wait
`

func cmdHibernate(ctx context.Context, e env, args []string) int {
	return flagAction(ctx, e, args, "hibernate", "hibernating", hibernateHelp, (*client.Client).Hibernate,
		&waitGoalOf{untilHibernated, "every machine that can stop is stopped"})
}

func cmdWake(ctx context.Context, e env, args []string) int {
	return flagAction(ctx, e, args, "wake", "waking", hibernateHelp, (*client.Client).Wake,
		&waitGoalOf{untilReady, "the cluster is ready again"})
}

// waitGoalOf is what an action's --wait waits for.
type waitGoalOf struct {
	goal  waitGoal
	until string // for --wait's help
}

// flagAction runs an action that sets one spec flag (pause, resume,
// hibernate, wake): capn VERB NAME, and --wait when wait is not nil.
func flagAction(ctx context.Context, e env, args []string, verb, done, help string,
	call func(*client.Client, context.Context, string) (*capnv1.Cluster, error), wait *waitGoalOf) int {
	name := "capn " + verb
	usage := name + " NAME"
	if wait != nil {
		usage += " [--wait]"
	}
	fs := newFlags(e, usage, help)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	if wait != nil {
		wf.bind(fs, wait.until)
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos, "the cluster's NAME"); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := call(s.c, ctx, pos[0])
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "cluster/%s %s\n", pos[0], done)
	if wait == nil || !wf.wait {
		return runtime.ExitOK
	}
	if err := s.waitFor(ctx, pos[0], wait.goal, c.GetMetadata().GetGeneration(), wf.timeout); err != nil {
		return s.fail(err)
	}
	return runtime.ExitOK
}

const deleteHelp = `
Deletes a cluster: capn removes the workers, then the control plane, the
infrastructure and the cluster's secrets, then the cluster. Without --wait
it returns once the deletion is requested; with --wait, once the cluster
is gone, showing the machines left and the current step.

Examples:
  capn delete cluster demo --wait
`

func cmdDelete(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn delete cluster NAME [--wait]", deleteHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "the cluster is gone")
	const name = "capn delete"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) > 0 && pos[0] != "cluster" && pos[0] != "clusters" && pos[0] != "cl" {
		return reportError(e.stderr, name, nil, usagef("cannot delete %q: capn deletes clusters (capn delete cluster NAME)", pos[0]))
	}
	if err := wantArgs(pos, "cluster", "the cluster's NAME"); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := s.c.Delete(ctx, pos[1])
	if err != nil {
		return s.fail(err)
	}
	if c.GetSpec().GetPaused() {
		fmt.Fprintf(e.stderr, "capn delete: cluster %s is paused: nothing happens until capn resume %s\n", pos[1], pos[1])
	}
	if !wf.wait {
		fmt.Fprintf(e.stdout, "cluster/%s deleting\n", pos[1])
		return runtime.ExitOK
	}
	if err := s.waitFor(ctx, pos[1], untilGone, 0, wf.timeout); err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "cluster/%s deleted\n", pos[1])
	return runtime.ExitOK
}
