package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

const getHelp = `
Lists clusters, machines, add-on sets or cluster classes, or shows those named (TYPE NAME... or
TYPE/NAME..., as -o name prints them). The table shows what capn is doing
(PHASE) and how many machines are ready out of desired; -o wide adds more
columns, -o json and -o yaml print Kubernetes-style lists ({"kind":
"ClusterList", "apiVersion": "capn.dev/v1alpha1", "items": [...]}) or the
one object named, -o name prints cluster/NAME and machine/NAME lines, -o
go-template=TEMPLATE runs a Go text/template on the JSON of the list (or
of the one object named). A machine named without --cluster is looked up
in every cluster. capn has no namespaces: -A is accepted and ignored.

capn get addonsets shows each add-on set's mode, order, whether it blocks
its clusters' readiness and on how many of the clusters it selects it is
applied; -o wide adds its selector, what happens to its objects when it
stops selecting a cluster, its generation and the clusters where it is not
applied, with why (capn describe cluster NAME shows one cluster's sets).

capn get clusterclasses shows each class's current revision, its variables
(how many, how many required), its pool classes, how many clusters use it
and how many of those are at its current revision (UP-TO-DATE); -o wide
adds the template's Kubernetes version, the age of the current revision and
its hash. capn get clusters shows each class cluster's CLASS, REVISION and
UP-TO-DATE.

With -w the list is followed by a line for each change (Ctrl-C stops).

Examples:
  capn get clusters
  capn get clusters -l env=dev -o wide
  capn get cluster/demo -o yaml
  capn get machines --cluster demo -w
  capn get machine/demo-md-0-5d4c9-0
  capn get addonsets -o wide
  capn get clusterclasses
  capn get clusterclass standard -o yaml
  capn get clusters -o go-template='{{range .items}}{{.metadata.name}} {{.status.phase}}{{"\n"}}{{end}}'
`

// getOpts are capn get's settings.
type getOpts struct {
	machines       bool
	addonSets      bool
	clusterClasses bool
	names          []string // none: the list
	cluster        string
	output         string
	selector       string
	watch          bool
	selectorParsed labels.Selector
	// classes: a listed cluster belongs to a ClusterClass, so the table
	// has the CLASS, REVISION and UP-TO-DATE columns.
	classes bool
}

func cmdGet(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn get clusters|machines|addonsets|clusterclasses [NAME...] | TYPE/NAME... [flags]", getHelp)
	var a apiFlags
	a.bind(fs)
	var o getOpts
	fs.StringVar(&o.output, "o", "", "output `format`: wide, yaml, json, name or go-template=TEMPLATE")
	fs.StringVar(&o.output, "output", "", "`format`: same as -o")
	fs.BoolVar(&o.watch, "w", false, "after listing, print a line for each change until Ctrl-C")
	fs.BoolVar(&o.watch, "watch", false, "same as -w")
	fs.StringVar(&o.selector, "l", "", "label `selector`, e.g. env=dev,tier!=db")
	fs.StringVar(&o.selector, "selector", "", "`selector`: same as -l")
	fs.StringVar(&o.cluster, "cluster", "", "machines of this `cluster` (default: every cluster's)")
	allNamespaces(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := o.parse(pos); err != nil {
		return reportError(e.stderr, "capn get", nil, err)
	}
	s, err := a.connect(e, "capn get")
	if err != nil {
		return reportError(e.stderr, "capn get", nil, err)
	}
	if o.addonSets {
		err = s.getAddonSets(ctx, o)
	} else if o.clusterClasses {
		err = s.getClasses(ctx, o)
	} else if o.watch {
		err = s.watchGet(ctx, o)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return daemon.ExitOK // Ctrl-C ends a watch
		}
	} else {
		err = s.get(ctx, o)
	}
	if err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}

func (o *getOpts) parse(pos []string) error {
	if len(pos) == 0 {
		return usagef("missing what to get: clusters, machines, or TYPE/NAME")
	}
	r, err := parseRefs(pos)
	if err != nil {
		return err
	}
	o.machines, o.addonSets, o.clusterClasses, o.names = r.res == resMachine, r.res == resAddonSet, r.res == resClass, r.names
	if len(o.names) > 0 && o.selector != "" {
		return usagef("-l selects from a list: it cannot go with a name")
	}
	if o.cluster != "" && !o.machines {
		return usagef("--cluster goes with machines")
	}
	if o.addonSets && o.watch {
		return usagef("-w watches clusters and machines; capn get addonsets lists the sets and their clusters once")
	}
	if o.clusterClasses && (o.watch || o.selector != "") {
		return usagef("capn get clusterclasses lists the classes once: it takes no -w or -l")
	}
	if err := checkOutput(o.output); err != nil {
		return err
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return usagef("-l %q: %v", o.selector, err)
	}
	o.selectorParsed = sel
	return nil
}

// get prints the list, or the objects named, once.
func (s *session) get(ctx context.Context, o getOpts) error {
	var objs []proto.Message
	switch {
	case !o.machines && len(o.names) > 0:
		for _, name := range o.names {
			c, err := s.c.Get(ctx, name)
			if err != nil {
				return err
			}
			objs = append(objs, c)
		}
	case !o.machines:
		cs, err := s.c.List(ctx, client.ListOptions{LabelSelector: o.selector})
		if err != nil {
			return err
		}
		for _, c := range cs {
			objs = append(objs, c)
		}
	case len(o.names) > 0:
		for _, name := range o.names {
			m, err := s.machine(ctx, o.cluster, name)
			if err != nil {
				return err
			}
			objs = append(objs, m)
		}
	default:
		ms, err := s.machines(ctx, o.cluster, o.selector)
		if err != nil {
			return err
		}
		for _, m := range ms {
			objs = append(objs, m)
		}
	}
	w := s.e.stdout
	switch o.output {
	case outTable, outWide:
		if len(objs) == 0 {
			fmt.Fprintln(s.e.stderr, "No resources found.")
			return nil
		}
		now := time.Now()
		for _, obj := range objs {
			if c, ok := obj.(*capnv1.Cluster); ok && c.GetSpec().GetTopology() != nil {
				o.classes = true
			}
		}
		rows := [][]string{o.header()}
		for _, obj := range objs {
			rows = append(rows, o.row(obj, now, false))
		}
		writeTable(w, rows)
		return nil
	}
	return printObjects(w, o.output, listKind(o.machines), len(o.names) == 1, objs)
}

// machine gets a machine by name: in cluster, or, without one, in the
// cluster whose machines it is. The planner names a machine
// CLUSTER-POOL-HASH-N, so the clusters whose name it starts with are
// asked first; a name it shortened is found in the others' lists.
func (s *session) machine(ctx context.Context, cluster, name string) (*capnv1.Machine, error) {
	if cluster != "" {
		return s.c.Machine(ctx, cluster, name)
	}
	cs, err := s.c.List(ctx, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	var others []string
	for _, c := range cs {
		cn := c.GetMetadata().GetName()
		if !strings.HasPrefix(name, cn+"-") {
			others = append(others, cn)
			continue
		}
		m, err := s.c.Machine(ctx, cn, name)
		if err == nil || !client.IsNotFound(err) {
			return m, err
		}
	}
	for _, cn := range others {
		ms, err := s.c.Machines(ctx, cn, client.ListOptions{})
		if err != nil && !client.IsNotFound(err) {
			return nil, err
		}
		for _, m := range ms {
			if m.GetMetadata().GetName() == name {
				return m, nil
			}
		}
	}
	return nil, fmt.Errorf("machine %s not found in any of the %d clusters", name, len(cs))
}

// machines lists one cluster's machines, or every cluster's.
func (s *session) machines(ctx context.Context, cluster, selector string) ([]*capnv1.Machine, error) {
	if cluster != "" {
		return s.c.Machines(ctx, cluster, client.ListOptions{LabelSelector: selector})
	}
	cs, err := s.c.List(ctx, client.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*capnv1.Machine
	for _, c := range cs {
		ms, err := s.c.Machines(ctx, c.GetMetadata().GetName(), client.ListOptions{LabelSelector: selector})
		if client.IsNotFound(err) {
			continue // deleted since the list
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

func (o getOpts) header() []string {
	if o.machines {
		return machineHeader(o.output == outWide, o.cluster == "")
	}
	return clusterHeader(o.output == outWide, o.classes)
}

// row is an object's table row; deleted (from a watch) shows the phase
// Deleted.
func (o getOpts) row(obj proto.Message, now time.Time, deleted bool) []string {
	var r []string
	switch v := obj.(type) {
	case *capnv1.Cluster:
		r = clusterRow(v, now, o.output == outWide, o.classes)
	case *capnv1.Machine:
		r = machineRow(v, now, o.output == outWide, o.cluster == "")
	}
	if deleted {
		i := slices.Index(o.header(), "PHASE")
		r[i] = capnv1.ClusterDeleted.Wire()
	}
	return r
}

// ageColumn is the index of AGE in the table.
func (o getOpts) ageColumn() int { return slices.Index(o.header(), "AGE") }

// typicalRow sizes the columns of a watch, whose later rows may be wider
// than the first ones (a phase going from Ready to Provisioning).
func (o getOpts) typicalRow() []string {
	if o.machines {
		cluster := o.cluster
		if cluster == "" {
			cluster = "a-cluster-name"
		}
		name := cluster + "-control-plane-00000-0" // how the planner names machines
		return machineRow(&capnv1.Machine{
			Metadata: &capnv1.ObjectMeta{Name: name},
			Spec:     &capnv1.MachineSpec{Cluster: cluster, Pool: "control-plane", Version: "v1.34.10"},
			Status:   &capnv1.MachineStatus{Phase: capnv1.MachineBootstrapping.Wire(), NodeName: name},
		}, time.Now(), o.output == outWide, o.cluster == "")
	}
	return clusterRow(&capnv1.Cluster{Status: &capnv1.ClusterStatus{Phase: capnv1.ClusterProvisioning.Wire()}}, time.Now(), o.output == outWide, o.classes)
}

// selects says whether a watched object is one the command asked for.
func (o getOpts) selects(obj proto.Message) bool {
	var md *capnv1.ObjectMeta
	switch v := obj.(type) {
	case *capnv1.Cluster:
		md = v.GetMetadata()
	case *capnv1.Machine:
		md = v.GetMetadata()
	}
	if len(o.names) > 0 && !slices.Contains(o.names, md.GetName()) {
		return false
	}
	return o.selectorParsed.Matches(labels.Set(md.GetLabels()))
}

// watchGet prints the current objects (as capn get does), then one line
// (or document) per change, until ctx ends.
func (s *session) watchGet(ctx context.Context, o getOpts) error {
	wo := client.WatchOptions{Kind: api.KindCluster}
	if o.machines {
		wo = client.WatchOptions{Kind: api.KindMachine, Cluster: o.cluster}
	} else if len(o.names) == 1 {
		wo.Cluster = o.names[0]
	}
	w := s.e.stdout
	var initial []proto.Message
	synced := false
	var tbl *table
	shown := map[string]string{} // the last row printed per object, without AGE
	emit := func(obj proto.Message, deleted bool) error {
		switch o.output {
		case outTable, outWide:
			if tbl == nil {
				tbl = newTable(o.header(), o.typicalRow())
			}
			row := o.row(obj, time.Now(), deleted)
			key, cells := nameOf(obj), strings.Join(slices.Delete(slices.Clone(row), o.ageColumn(), o.ageColumn()+1), "\x00")
			if shown[key] == cells {
				return nil // only the status's timestamps changed
			}
			shown[key] = cells
			_, err := io.WriteString(w, tbl.line(row))
			return err
		case outJSON, outYAML:
			if err := printObjects(w, o.output, "", true, []proto.Message{obj}); err != nil {
				return err
			}
			if o.output == outYAML {
				_, err := io.WriteString(w, "---\n")
				return err
			}
			return nil
		}
		return printObjects(w, o.output, "", true, []proto.Message{obj})
	}
	return s.c.Watch(ctx, wo, func(ev client.WatchEvent) error {
		var obj proto.Message
		switch {
		case ev.Cluster != nil:
			obj = ev.Cluster
		case ev.Machine != nil:
			obj = ev.Machine
		}
		switch ev.Type {
		case api.WatchSynced:
			if synced {
				return nil
			}
			synced = true
			slices.SortFunc(initial, func(a, b proto.Message) int { return strings.Compare(nameOf(a), nameOf(b)) })
			if o.output == outTable || o.output == outWide {
				rows := [][]string{o.header()}
				for _, obj := range initial {
					rows = append(rows, o.row(obj, time.Now(), false))
				}
				tbl = newTable(append(rows, o.typicalRow())...)
				for _, r := range rows {
					io.WriteString(w, tbl.line(r))
				}
				return nil
			}
			for _, obj := range initial {
				if err := emit(obj, false); err != nil {
					return err
				}
			}
			return nil
		case api.WatchAdded, api.WatchModified, api.WatchDeleted:
			if obj == nil || !o.selects(obj) {
				return nil
			}
			if !synced {
				initial = append(initial, obj)
				return nil
			}
			return emit(obj, ev.Type == api.WatchDeleted)
		}
		return nil
	})
}
