package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

const scaleHelp = `
Sets the number of machines of a worker pool, or of the control plane
with --pool control-plane (1, 3, 5 or 7 machines: etcd needs an odd
number; a hosted control plane runs 1 or 3 API servers, an external
one is its owner's and stays at 1).
A worker pool may go to 0. With --wait, waits until the cluster is ready
again: no machine of it is still being deleted.

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
	var replicas int
	fs.StringVar(&pool, "pool", "", "worker `pool` to scale, or control-plane (required)")
	fs.IntVar(&replicas, "replicas", 0, "the `number` of machines wanted, 0 or more (required)")
	const name = "capn scale"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := oneCluster(pos, name)
	switch {
	case err != nil:
	case pool == "":
		err = usagef("--pool is required: a worker pool's name, or %s", api.ControlPlanePool)
	case !given(fs, "replicas"):
		err = usagef("--replicas is required: the number of machines wanted, 0 or more")
	case replicas < 0:
		err = usagef("--replicas: must be 0 or more, got %d", replicas)
	case replicas > maxReplicas:
		err = usagef("--replicas: must be at most %d, got %d", maxReplicas, replicas)
	}
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := s.c.Scale(ctx, cluster, pool, int32(replicas))
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "cluster/%s scaled: %s to %d replicas\n", cluster, poolWord(pool), replicas)
	return s.finish(ctx, c, wf)
}

// maxReplicas bounds --replicas well inside an int32.
const maxReplicas = 1 << 20

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

The upgrade starts at once, whatever the cluster's maintenance windows
(also with spec.maintenance.confineSpecRollouts).
With --respect-window it is recorded instead (spec.maintenance.pendingVersion)
and the maintenance service starts it when the cluster's next window opens
(at once for a cluster without windows); capn describe shows it waiting.

Examples:
  capn upgrade demo --version v1.34.2 --wait
  capn upgrade demo --version v1.35.0 --respect-window
`

func cmdUpgrade(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn upgrade NAME --version VERSION [--wait | --respect-window]", upgradeHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "every machine runs the new version and the cluster is ready")
	var version string
	fs.StringVar(&version, "version", "", "the Kubernetes `version`, e.g. v1.34.2")
	var inWindow bool
	fs.BoolVar(&inWindow, "respect-window", false, "record the upgrade for the cluster's next maintenance window instead of starting it now")
	const name = "capn upgrade"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := oneCluster(pos, name)
	switch {
	case err != nil:
	case version == "":
		err = usagef("--version is required, e.g. v1.34.2")
	case inWindow && wf.wait:
		err = usagef("--wait and --respect-window do not go together: the upgrade starts in the cluster's next maintenance window")
	default:
		if _, perr := manifest.ParseVersion(version); perr != nil {
			err = usagef("--version: must be vMAJOR.MINOR.PATCH, e.g. v1.34.2, got %q", version)
		}
	}
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if inWindow {
		c, err := s.c.UpgradeInWindow(ctx, cluster, version)
		if err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "cluster/%s will upgrade from %s to %s in its next maintenance window (capn describe cluster %s shows when)\n",
			cluster, c.GetSpec().GetKubernetesVersion(), version, cluster)
		return 0
	}
	c, err := s.c.Upgrade(ctx, cluster, version)
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
	msg := fmt.Sprintf("cluster/%s upgrading to %s: the control plane", cluster, version)
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
		return daemon.ExitOK
	}
	if err := s.waitFor(ctx, c.GetMetadata().GetName(), untilReady, c.GetMetadata().GetGeneration(), wf.timeout); err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
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
	cluster, err := oneCluster(pos, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := call(s.c, ctx, cluster)
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "cluster/%s %s\n", cluster, done)
	if wait == nil || !wf.wait {
		return daemon.ExitOK
	}
	if err := s.waitFor(ctx, cluster, wait.goal, c.GetMetadata().GetGeneration(), wf.timeout); err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}

const deleteHelp = `
Deletes clusters: capn removes the workers, then the control plane, the
infrastructure and the cluster's secrets, then the cluster. Name them
(cluster NAME..., or cluster/NAME... as capn get -o name prints them) or
select them with -l. Every cluster named must exist, or none is deleted.
Each deletion is reported on its own line. Without --wait it returns once
every deletion is requested; with --wait, once every cluster is gone
(--timeout bounds the whole wait), showing the machines left and the
current step.

With --orphan capn lets go of the clusters without touching them: no
machine, Node or infrastructure is deleted; their providers only drop
their records (the Orphan policy: what capn move does once another
deployment has adopted them). It goes on while a cluster is paused. The
first delete of a cluster decides its policy.

capn delete clusterclass NAME deletes a cluster class with its revisions;
it is refused while clusters use it (the error names them): delete those
clusters first.

capn delete machine NAME --cluster CLUSTER chooses which machine goes:
capn drains its Node and deletes it (its lifecycle hooks hold it, see
capn hook), and makes a replacement, since the pool's replicas did not
change (to remove a machine for good, scale its pool down). With --wait
it returns once the machine is gone and its replacement is Running,
printing each change of the machine's phase and what it waits for. The
last control-plane machine is refused: scale the control plane, or
delete the cluster.

Examples:
  capn delete cluster demo --wait
  capn delete cluster/a cluster/b
  capn delete clusters -l env=dev --wait
  capn delete cluster demo --orphan
  capn get clusters -l env=dev -o name | xargs capn delete
  capn delete machine demo-md-0-7f9c2-x8k2p --cluster demo --wait
  capn delete clusterclass standard
`

func cmdDelete(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn delete cluster NAME... | cluster/NAME... | clusters -l SELECTOR | machine NAME --cluster CLUSTER [--wait] | addonset NAME... | clusterclass NAME...", deleteHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "every cluster is gone (a machine: it is gone and its replacement is Running)")
	var selector, cluster string
	var orphanPolicy bool
	fs.BoolVar(&orphanPolicy, "orphan", false, "let go of the clusters without touching them: their machines, Nodes and infrastructure keep running for another capn to adopt (the Orphan policy; capn move uses it)")
	fs.StringVar(&selector, "l", "", "delete the clusters with these labels: a `selector`, e.g. env=dev")
	fs.StringVar(&selector, "selector", "", "`selector`: same as -l")
	fs.StringVar(&cluster, "cluster", "", "the `cluster` of the machine to delete (capn delete machine NAME --cluster CLUSTER)")
	const name = "capn delete"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if r, rerr := parseRefs(pos); rerr == nil && r.res == resMachine {
		if orphanPolicy {
			return reportError(e.stderr, name, nil, usagef("--orphan goes with clusters: a machine deleted alone is replaced"))
		}
		return deleteOneMachine(ctx, e, a, r, cluster, selector, wf)
	} else if rerr == nil && r.res == resAddonSet {
		if cluster != "" || selector != "" || wf.wait {
			return reportError(e.stderr, "capn delete", nil, usagef("capn delete addonset NAME... takes no --cluster, -l or --wait"))
		}
		return deleteAddonSets(ctx, e, a, r.names)
	} else if rerr == nil && r.res == resClass {
		if cluster != "" || selector != "" || wf.wait || orphanPolicy {
			return reportError(e.stderr, name, nil, usagef("capn delete clusterclass NAME... takes no --cluster, -l, --wait or --orphan"))
		}
		return deleteClasses(ctx, e, a, r.names)
	}
	if cluster != "" {
		return reportError(e.stderr, name, nil, usagef("--cluster goes with a machine: capn delete machine NAME --cluster CLUSTER"))
	}
	names, err := deleteTargets(pos, selector)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	var opts []client.WriteOption
	if orphanPolicy {
		opts = append(opts, client.Orphan)
	}
	if err := s.deleteClusters(ctx, names, selector, wf, opts...); err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}

// deleteOneMachine is capn delete machine NAME --cluster CLUSTER.
func deleteOneMachine(ctx context.Context, e env, a apiFlags, r refs, cluster, selector string, wf waitFlags) int {
	const name = "capn delete"
	machine, err := machineTarget(r, cluster)
	if err == nil && selector != "" {
		err = usagef("-l selects clusters: capn deletes one machine at a time, by name")
	}
	if err == nil {
		cluster, err = clusterArg(cluster, name)
	}
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if err := s.deleteMachine(ctx, cluster, machine, wf); err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}

// deleteTargets checks capn delete's arguments: the clusters named
// (without repeats), or none with a selector.
func deleteTargets(pos []string, selector string) ([]string, error) {
	if len(pos) == 0 {
		return nil, usagef("missing what to delete: cluster NAME..., cluster/NAME... or clusters -l SELECTOR")
	}
	if _, ok := resourceOf(pos[0]); !ok && !strings.Contains(pos[0], "/") {
		return nil, usagef("cannot delete %q: capn deletes clusters (capn delete cluster %s)", pos[0], pos[0])
	}
	r, err := parseRefs(pos)
	switch {
	case err != nil:
		return nil, err
	case r.res != resCluster:
		return nil, usagef("cannot delete %s: capn deletes clusters, and machines one at a time (capn delete machine NAME --cluster CLUSTER)", r.res.plural)
	case selector != "" && len(r.names) > 0:
		return nil, usagef("-l selects the clusters to delete: it cannot go with names")
	case selector == "" && len(r.names) == 0:
		return nil, usagef("missing the clusters to delete: their names, or -l SELECTOR")
	}
	if selector != "" {
		if _, err := labels.Parse(selector); err != nil {
			return nil, usagef("-l %q: %v", selector, err)
		}
	}
	var names []string
	for _, n := range r.names {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// deleteClusters deletes the clusters named, or those selector selects:
// first it checks that every cluster named exists (if one does not,
// nothing is deleted), then it deletes each, printing a line for each,
// then, with --wait, waits until every one is gone.
func (s *session) deleteClusters(ctx context.Context, names []string, selector string, wf waitFlags, opts ...client.WriteOption) error {
	if selector != "" {
		cs, err := s.c.List(ctx, client.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(cs) == 0 {
			fmt.Fprintln(s.e.stderr, "No resources found.")
			return nil
		}
		for _, c := range cs {
			names = append(names, c.GetMetadata().GetName())
		}
	} else {
		var missing []string
		for _, n := range names {
			if _, err := s.c.Get(ctx, n); client.IsNotFound(err) {
				missing = append(missing, n)
			} else if err != nil && !client.IsCorrupt(err) { // a corrupt record exists, and delete removes it
				return err
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no cluster %s: nothing deleted", strings.Join(missing, ", no cluster "))
		}
	}
	deadline := time.Now().Add(wf.timeout)
	for _, n := range names {
		c, err := s.c.Delete(ctx, n, opts...)
		if err != nil {
			return err
		}
		if c.GetSpec().GetPaused() {
			fmt.Fprintf(s.e.stderr, "capn delete: cluster %s is paused: nothing happens until capn resume %s\n", n, n)
		}
		if !wf.wait {
			fmt.Fprintf(s.e.stdout, "cluster/%s deleting\n", n)
		}
	}
	if !wf.wait {
		return nil
	}
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, n := range names {
		if err := s.waitFor(wctx, n, untilGone, 0, wf.timeout); err != nil {
			return err
		}
		fmt.Fprintf(s.e.stdout, "cluster/%s deleted\n", n)
	}
	return nil
}
