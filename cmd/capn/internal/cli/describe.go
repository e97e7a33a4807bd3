package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/services/daemon"
)

const describeHelp = `
Shows a cluster as a tree, like clusterctl describe cluster: the cluster,
its control plane, its worker pools and their machines, each with its
phase, version, whether it is ready and, when it is not, the reason and
message that say why. Then the cluster's conditions and its latest events.

Examples:
  capn describe cluster demo
  capn describe cluster/demo --show-conditions
`

func cmdDescribe(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn describe cluster NAME | cluster/NAME [--show-conditions]", describeHelp)
	var a apiFlags
	a.bind(fs)
	var showConds bool
	fs.BoolVar(&showConds, "show-conditions", false, "list every condition of every machine in the tree")
	const name = "capn describe"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := describeTarget(pos)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	c, err := s.c.Get(ctx, cluster)
	if err != nil {
		return s.fail(err)
	}
	ms, err := s.c.Machines(ctx, cluster, client.ListOptions{})
	if err != nil && !client.IsNotFound(err) {
		return s.fail(err)
	}
	evs, _ := s.c.Events(ctx, cluster, client.EventsOptions{Limit: 10}) // best effort: the tree is what matters
	addons, _ := s.c.ClusterAddons(ctx, cluster)                        // best effort too
	cp, err := s.c.ControlPlane(ctx, cluster)                           // best effort too
	if err != nil {
		cp = nil
	}
	describeCluster(e.stdout, c, ms, evs, describeOpts{now: time.Now(), loc: time.Local, showConditions: showConds, addons: addons, controlPlane: cp})
	return daemon.ExitOK
}

// describeTarget is the cluster of capn describe cluster NAME (or
// cluster/NAME).
func describeTarget(pos []string) (string, error) {
	if len(pos) == 0 {
		return "", usagef("missing the cluster: capn describe cluster NAME")
	}
	if _, ok := resourceOf(pos[0]); !ok && !strings.Contains(pos[0], "/") {
		return "", usagef("cannot describe %q: capn describes clusters (capn describe cluster %s)", pos[0], pos[0])
	}
	r, err := parseRefs(pos)
	switch {
	case err != nil:
		return "", err
	case r.res != resCluster:
		return "", usagef("cannot describe %s: capn describes clusters, their machines in the tree (capn get %s NAME -o yaml shows one)", r.res.plural, r.res.singular)
	case len(r.names) == 0:
		return "", usagef("missing the cluster's NAME")
	case len(r.names) > 1:
		return "", usagef("unexpected argument %q: capn describes one cluster", pos[len(pos)-len(r.names)+1])
	}
	return r.names[0], nil
}

type describeOpts struct {
	now            time.Time
	loc            *time.Location
	showConditions bool
	// addons are the cluster's add-on records (the Add-ons section).
	addons []*capnv1.ClusterAddonStatus
	// controlPlane is the cluster's control-plane record (nil: none).
	controlPlane *capnv1.ControlPlaneRecord
}

// treeNode is one line of the tree and what hangs under it.
type treeNode struct {
	name     string
	cells    []string // PHASE VERSION READY REASON SINCE MESSAGE
	children []*treeNode
}

func (n *treeNode) add(c *treeNode) *treeNode { n.children = append(n.children, c); return c }

// rows renders the tree with box-drawing prefixes.
func (n *treeNode) rows(prefix string, last, root bool, out *[][]string) {
	name, childPrefix := n.name, ""
	if !root {
		branch, cont := "├─", "│ "
		if last {
			branch, cont = "└─", "  "
		}
		name, childPrefix = prefix+branch+n.name, prefix+cont
	}
	*out = append(*out, append([]string{name}, n.cells...))
	for i, c := range n.children {
		c.rows(childPrefix, i == len(n.children)-1, false, out)
	}
}

// describeCluster writes the cluster's summary, tree, conditions and
// events.
func describeCluster(w io.Writer, c *capnv1.Cluster, ms []*capnv1.Machine, evs []api.TimelineEvent, o describeOpts) {
	md, spec, st := c.GetMetadata(), c.GetSpec(), c.GetStatus()
	kv := [][]string{{"Name:", md.GetName()}}
	var labels []string
	for _, k := range sortedKeys(md.GetLabels()) {
		labels = append(labels, k+"="+md.GetLabels()[k])
	}
	kv = append(kv, []string{"Labels:", orNone(strings.Join(labels, ","))})
	if t := md.GetCreationTimestamp(); t != nil {
		kv = append(kv, []string{"Created:", t.AsTime().In(o.loc).Format(time.RFC3339) + " (" + age(t, o.now) + " ago)"})
	}
	kv = append(kv, []string{"Generation:", fmt.Sprintf("%d (status of generation %d)", md.GetGeneration(), st.GetObservedGeneration())})
	if ep := st.GetControlPlaneEndpoint(); ep.GetHost() != "" {
		kv = append(kv, []string{"Endpoint:", fmt.Sprintf("%s:%d", ep.GetHost(), ep.GetPort())})
	}
	if line := controlPlaneLine(spec.GetControlPlane().Implementation(), o.controlPlane); line != "" {
		kv = append(kv, []string{"Control plane:", line})
	}
	kv = append(kv, []string{"Providers:", providers(spec)})
	if spec.GetPaused() {
		kv = append(kv, []string{"Paused:", "yes: capn takes no action until capn resume " + md.GetName()})
	}
	if t := md.GetDeletionTimestamp(); t != nil {
		kv = append(kv, []string{"Deleting:", "requested " + age(t, o.now) + " ago"})
	}
	writeTable(w, kv)
	fmt.Fprintln(w)

	rows := [][]string{{"NAME", "PHASE", "VERSION", "READY", "REASON", "SINCE", "MESSAGE"}}
	clusterTree(c, ms, o).rows("", true, true, &rows)
	writeTable(w, rows)
	describeAutoscaling(w, c, o)
	var mb strings.Builder
	describeMaintenance(&mb, c, o.now)
	describeCertificates(&mb, c, o.now)
	if mb.Len() > 0 {
		fmt.Fprint(w, "\n"+mb.String())
	}

	if len(st.GetConditions()) > 0 {
		fmt.Fprint(w, "\nConditions:\n")
		crows := [][]string{{"  TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"}}
		for _, cd := range st.GetConditions() {
			crows = append(crows, []string{"  " + cd.GetType(), cd.GetStatus(), cd.GetReason(), age(cd.GetLastTransitionTime(), o.now), cd.GetMessage()})
		}
		writeTable(w, crows)
	}
	if rec := o.controlPlane; len(rec.GetConditions()) > 0 {
		fmt.Fprintf(w, "\nControl plane (%s):\n", orNone(rec.GetImplementation()))
		crows := [][]string{{"  TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"}}
		for _, cd := range rec.GetConditions() {
			crows = append(crows, []string{"  " + cd.GetType(), cd.GetStatus(), cd.GetReason(), age(cd.GetLastTransitionTime(), o.now), cd.GetMessage()})
		}
		writeTable(w, crows)
	}
	describeAddons(w, o.addons, o.now)
	if len(evs) > 0 {
		fmt.Fprint(w, "\nEvents (latest first):\n")
		p := &eventPrinter{loc: o.loc}
		erows := [][]string{{"  TIME", "OBJECT", "REASON", "MESSAGE"}}
		for i := len(evs) - 1; i >= 0; i-- {
			r := p.row(evs[i])
			r[0] = "  " + r[0]
			erows = append(erows, r)
		}
		writeTable(w, erows)
	}
}

// controlPlaneLine is the Control plane: line — the implementation with
// its record's endpoint, version and API servers ready — or "" for a
// control plane on machines with no record to show (its tree says it all).
func controlPlaneLine(impl string, rec *capnv1.ControlPlaneRecord) string {
	if rec == nil {
		if impl == capnv1.ControlPlaneMachines {
			return ""
		}
		return impl + " (no record yet: its implementation has not reported)"
	}
	parts := []string{}
	if ep := rec.GetEndpoint(); ep.GetHost() != "" {
		parts = append(parts, fmt.Sprintf("endpoint %s:%d", ep.GetHost(), ep.GetPort()))
	}
	if v := rec.GetVersion(); v != "" {
		parts = append(parts, v)
	}
	parts = append(parts, fmt.Sprintf("%d/%d ready", rec.GetReadyReplicas(), rec.GetReplicas()))
	if !rec.GetInitialized() {
		parts = append(parts, "not initialized")
	}
	return impl + " (" + strings.Join(parts, ", ") + ")"
}

func providers(spec *capnv1.ClusterSpec) string {
	var ps []string
	add := func(p string) {
		if p != "" && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	add(spec.GetControlPlane().GetProvider())
	for _, p := range spec.GetWorkerPools() {
		add(p.GetProvider())
	}
	return orNone(strings.Join(ps, ", "))
}

// clusterTree builds cluster → control plane → pools → machines.
func clusterTree(c *capnv1.Cluster, ms []*capnv1.Machine, o describeOpts) *treeNode {
	spec, st := c.GetSpec(), c.GetStatus()
	conds := st.GetConditions()
	root := &treeNode{name: "Cluster/" + c.GetMetadata().GetName(),
		cells: conditionCells(clusterPhase(c), spec.GetKubernetesVersion(), conditions.Get(conds, condReady), o.now)}

	byPool := map[string][]*capnv1.Machine{}
	for _, m := range ms {
		byPool[m.GetSpec().GetPool()] = append(byPool[m.GetSpec().GetPool()], m)
	}
	for _, l := range byPool {
		slices.SortFunc(l, func(a, b *capnv1.Machine) int {
			return strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
		})
	}

	cpc := conditions.Get(conds, condControlPlaneReady)
	cp := root.add(&treeNode{name: "ControlPlane", cells: poolCells(st.GetControlPlane(), spec.GetKubernetesVersion(), spec.GetControlPlane().GetReplicas(), cpc, o.now)})
	addMachines(cp, byPool[api.ControlPlanePool], o)
	delete(byPool, api.ControlPlanePool)

	wc := conditions.Get(conds, condWorkersReady)
	workers := &treeNode{name: "Workers", cells: []string{"", "", "", "", "", ""}}
	if wc != nil {
		ready := wc.GetStatus()
		reason := ""
		if wc.GetStatusValue() != capnv1.ConditionTrue {
			reason = wc.GetReason()
		}
		workers.cells = []string{"", "", ready, reason, since(wc.GetLastTransitionTime(), o.now), ""}
	}
	poolMsgs := splitPoolMessages(wc.GetMessage())
	statuses := map[string]*capnv1.PoolStatus{}
	for _, ps := range st.GetWorkerPools() {
		statuses[ps.GetName()] = ps
	}
	for _, p := range spec.GetWorkerPools() {
		version := p.GetVersion()
		if version == "" {
			version = spec.GetKubernetesVersion()
		}
		cells := poolCells(statuses[p.GetName()], version, p.GetReplicas(), nil, o.now)
		if msg, ok := poolMsgs[p.GetName()]; ok {
			cells[5] = msg // only pools that are not ready have one
		}
		pn := workers.add(&treeNode{name: "Pool/" + p.GetName(), cells: cells})
		addMachines(pn, byPool[p.GetName()], o)
		delete(byPool, p.GetName())
	}
	// Machines of pools gone from the spec, or whose spec is already gone.
	for _, pool := range sortedKeys(byPool) {
		name := "Pool/" + pool + " (removed from the spec)"
		if pool == "" {
			name = "Machines being removed"
		}
		pn := workers.add(&treeNode{name: name, cells: []string{"", "", "", "", "", ""}})
		addMachines(pn, byPool[pool], o)
	}
	if len(workers.children) > 0 || wc != nil {
		root.add(workers)
	}
	return root
}

// conditionCells are a node's cells from its phase, version and a
// condition: READY is its status; REASON and MESSAGE are shown when it is
// not True.
func conditionCells(phase, version string, c *capnv1.Condition, now time.Time) []string {
	if c == nil {
		return []string{phase, version, "", "", "", ""}
	}
	reason, msg := "", ""
	if c.GetStatusValue() != capnv1.ConditionTrue {
		reason, msg = c.GetReason(), c.GetMessage()
	}
	return []string{phase, version, c.GetStatus(), reason, since(c.GetLastTransitionTime(), now), msg}
}

// poolCells: READY is ready/desired; the reason is the pool's state, the
// message (for the control plane) the ControlPlaneReady condition's.
func poolCells(ps *capnv1.PoolStatus, version string, desired int32, c *capnv1.Condition, now time.Time) []string {
	if ps != nil && ps.GetDesired() > 0 {
		desired = ps.GetDesired()
	}
	if v := ps.GetVersion(); v != "" && v != version {
		version = v + " → " + version
	}
	// READY never above desired: a surge machine is not one more ready one.
	cells := []string{"", version, fmt.Sprintf("%d/%d", min(ps.GetReady(), desired), desired), poolReason(ps, desired), "", ""}
	if c != nil {
		cells[4] = since(c.GetLastTransitionTime(), now)
		if c.GetStatusValue() != capnv1.ConditionTrue {
			cells[3], cells[5] = c.GetReason(), c.GetMessage()
		}
	}
	return cells
}

// poolReason is what a pool is doing, from its counts (as the planner
// words it).
func poolReason(ps *capnv1.PoolStatus, desired int32) string {
	switch {
	case ps == nil:
		return "Pending"
	case ps.GetUpdated() < ps.GetReplicas():
		return "RollingOut"
	case ps.GetReplicas() < desired:
		return "ScalingUp"
	case ps.GetReplicas() > desired:
		return "ScalingDown"
	case ps.GetAvailable() < desired:
		return "MachinesNotAvailable"
	}
	return ""
}

// splitPoolMessages reads the WorkersReady message ("pool md-0: ...; pool
// md-1: ...") into a message per pool.
func splitPoolMessages(msg string) map[string]string {
	out := map[string]string{}
	for part := range strings.SplitSeq(msg, "; pool ") {
		part = strings.TrimPrefix(part, "pool ")
		if name, m, ok := strings.Cut(part, ": "); ok && !strings.Contains(name, " ") {
			out[name] = m
		}
	}
	return out
}

func addMachines(parent *treeNode, ms []*capnv1.Machine, o describeOpts) {
	for _, m := range ms {
		reason, msg := machineTrouble(m)
		ready := capnv1.ConditionTrue
		if reason != "" {
			ready = capnv1.ConditionFalse
		}
		if m.GetMetadata().GetDeletionTimestamp() != nil && reason == "" {
			ready, reason = capnv1.ConditionFalse, "Deleting"
		}
		version := m.GetSpec().GetVersion()
		if v := m.GetStatus().GetKubeletVersion(); v != "" && v != version {
			version = v + " → " + version
		}
		n := parent.add(&treeNode{name: "Machine/" + m.GetMetadata().GetName(),
			cells: []string{machinePhase(m), version, ready.Wire(), reason, since(m.GetStatus().GetPhaseSince(), o.now), msg}})
		if h := machineHooks(m); h != nil {
			n.add(h)
		}
		if o.showConditions {
			for _, c := range m.GetStatus().GetConditions() {
				n.add(&treeNode{name: c.GetType(), cells: []string{"", "", c.GetStatus(), c.GetReason(), since(c.GetLastTransitionTime(), o.now), c.GetMessage()}})
			}
		}
	}
}

// since is age, or nothing when there is no time.
func since(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil {
		return ""
	}
	return age(t, now)
}

// describeAutoscaling lists the autoscaled pools: their bounds, replicas
// and the cluster autoscaler's last action on them (docs/autoscaling.md).
func describeAutoscaling(w io.Writer, c *capnv1.Cluster, o describeOpts) {
	statuses := map[string]*capnv1.PoolStatus{}
	for _, ps := range c.GetStatus().GetWorkerPools() {
		statuses[ps.GetName()] = ps
	}
	rows := [][]string{{"  POOL", "MIN", "MAX", "REPLICAS", "LAST ACTION", "SINCE", "MESSAGE"}}
	for _, p := range c.GetSpec().GetWorkerPools() {
		a := p.GetAutoscaling()
		if a == nil {
			continue
		}
		last := statuses[p.GetName()].GetLastAutoscalerAction()
		action, when := "none yet", ""
		if last != nil {
			action, when = last.GetReason(), age(last.GetTime(), o.now)+" ago"
		}
		rows = append(rows, []string{"  " + p.GetName(), fmt.Sprint(a.GetMin()), fmt.Sprint(a.GetMax()), fmt.Sprint(p.GetReplicas()), action, when, last.GetMessage()})
	}
	if len(rows) == 1 {
		return
	}
	fmt.Fprint(w, "\nAutoscaling (the cluster autoscaler sizes these pools):\n")
	writeTable(w, rows)
}
