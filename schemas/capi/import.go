package capi

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// API groups of the Cluster API objects Import reads.
const (
	GroupCore         = "cluster.x-k8s.io"
	GroupControlPlane = "controlplane.cluster.x-k8s.io"
	GroupBootstrap    = "bootstrap.cluster.x-k8s.io"
	GroupInfra        = "infrastructure.cluster.x-k8s.io"
)

// Errors of Import; match them with errors.Is.
var (
	// ErrNoCluster: the input holds no cluster.x-k8s.io Cluster.
	ErrNoCluster = errors.New("no Cluster (cluster.x-k8s.io) in the input")
	// ErrAmbiguous: several Clusters and Options.Cluster does not pick one.
	ErrAmbiguous = errors.New("several Clusters in the input")
	// ErrNeedProvider: an infrastructure kind has no known capn provider
	// and Options.Provider is empty.
	ErrNeedProvider = errors.New("no capn provider for this infrastructure")
	// ErrUnsupportedVersion: the Cluster is not v1beta1 or v1beta2.
	ErrUnsupportedVersion = errors.New("unsupported Cluster API version")
	// ErrBadProvider: Options.Provider is not a provider name.
	ErrBadProvider = errors.New("not a provider name")
)

// Options tune Import.
type Options struct {
	// Provider is the capn provider of every machine. When empty, it comes
	// from the infrastructure kinds (Docker* → docker, the in-memory kinds
	// → sim); a kind with no known provider is then ErrNeedProvider.
	Provider string
	// Cluster names the Cluster to import when the input holds several.
	Cluster string
	// Classes imports a topology cluster as a capn ClusterClass
	// (Result.Class) and a Cluster with spec.topology, rather than one
	// flat Cluster; its ClusterClass must be in the input (topoclass.go).
	Classes bool
}

// Note is something of the input that Import did not carry over.
type Note struct {
	// Object is the Cluster API object, "Kind/name".
	Object string
	// Path is the field in it, e.g. spec.kubeadmConfigSpec.users; empty
	// when the note is about the whole object.
	Path string
	// Value is the field's value when it is a scalar, as YAML would show
	// it: strings quoted (and cut after 60 characters), numbers as they are.
	Value string
	// Reason says why it was not mapped, or what was done instead.
	Reason string
}

// String renders "Kind/name: path = value: reason" on one line.
func (n Note) String() string {
	var b strings.Builder
	b.WriteString(n.Object)
	if n.Path != "" {
		b.WriteString(": " + n.Path)
	}
	if n.Value != "" {
		b.WriteString(" = " + n.Value)
	}
	b.WriteString(": " + n.Reason)
	return b.String()
}

// Result is what Import made.
type Result struct {
	// Cluster is the capn Cluster, not defaulted (print it with
	// manifest.Encode); nil when the input holds ClusterResourceSets
	// only.
	Cluster *capnv1.Cluster
	// Class is the capn ClusterClass of a topology cluster, with
	// Options.Classes (nil otherwise); Cluster then has spec.topology.
	Class *capnv1.ClusterClass
	// AddonSets are the input's ClusterResourceSets as capn AddonSets,
	// not defaulted (manifest.EncodeAddonSet), in the input's order.
	AddonSets []*capnv1.AddonSet
	// Notes list, one per field, what was not mapped, in the input's
	// order.
	Notes []Note
	// Invalid is manifest.Validate's verdict on the defaulted Cluster and
	// manifest.ValidateAddonSet's on each set (paths prefixed
	// "AddonSet/<name> "): nil, or errors.Join of *manifest.FieldError.
	Invalid error
}

// Import converts Cluster API manifests (cluster.x-k8s.io v1beta1 and
// v1beta2: a Cluster and the KubeadmControlPlane, MachineDeployments,
// MachineHealthChecks, KubeadmConfigTemplates and infrastructure objects
// it references, or the ClusterClass and templates of its topology) into
// one capn Cluster, and every ClusterResourceSet into an AddonSet (an
// input of ClusterResourceSets only is converted too). It is pure: no I/O.
func Import(data []byte, opts Options) (*Result, error) {
	if opts.Provider != "" && !manifest.IsDNSLabel(opts.Provider) {
		return nil, fmt.Errorf("provider %q: %w: it must be a DNS-1123 label, e.g. sim", opts.Provider, ErrBadProvider)
	}
	objs, err := parseObjects(data)
	if err != nil {
		return nil, err
	}
	c := &converter{opts: opts, objs: objs, byRef: map[string]*object{}, claimed: map[*object]bool{}, pools: map[string]*pool{}, usedClasses: map[string]bool{}}
	for _, o := range objs {
		c.byRef[o.ref()] = o
	}
	cl, err := c.pickCluster()
	if errors.Is(err, ErrNoCluster) && hasCRS(objs) {
		// Add-ons only: the sets, and what else the input has noted.
		c.addonSets()
		c.reportLeftovers()
		return &Result{AddonSets: c.sets, Notes: c.notes, Invalid: validateSets(c.sets)}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := c.convert(cl); err != nil {
		return nil, err
	}
	var class *capnv1.ClusterClass
	if c.opts.Classes && c.class != nil {
		if class, err = c.makeClass(cl); err != nil {
			return nil, err
		}
	}
	c.addonSets()
	c.reportLeftovers()
	if class != nil {
		return &Result{Cluster: c.out, Class: class, AddonSets: c.sets, Notes: c.notes,
			Invalid: errors.Join(validateClass(class, c.out), validateSets(c.sets))}, nil
	}
	res := &Result{Cluster: c.out, AddonSets: c.sets, Notes: c.notes}
	d := proto.Clone(c.out).(*capnv1.Cluster)
	manifest.Default(d)
	res.Invalid = errors.Join(manifest.Validate(d), validateSets(c.sets))
	return res, nil
}

// converter holds one import's state.
type converter struct {
	opts    Options
	objs    []*object
	byRef   map[string]*object
	claimed map[*object]bool
	notes   []Note
	out     *capnv1.Cluster
	name    string
	// pools by MachineDeployment name, in order.
	pools     map[string]*pool
	poolOrder []string
	// infraProvider is the provider the Cluster's infrastructureRef names.
	infraProvider string
	// healthFrom says which MachineHealthCheck set a pool's ("" for the
	// cluster's) health policy.
	healthFrom map[string]string
	// cluster is the imported Cluster, namespace its metadata.namespace.
	cluster   *object
	namespace string
	// class is the ClusterClass the topology uses when the input holds
	// it; usedClasses are its machine deployment classes the topology
	// uses.
	class       *object
	className   string
	usedClasses map[string]bool
	// fdNames are the failure domains the input's infrastructure defines,
	// fdDefinedIn where ("DockerCluster/a spec.failureDomains").
	fdNames     []string
	fdDefinedIn string
	// sets are the ClusterResourceSets converted (addons.go).
	sets []*capnv1.AddonSet
}

// pool is one worker pool being built from a MachineDeployment.
type pool struct {
	md     *object
	spec   *capnv1.WorkerPool
	labels map[string]string // the MachineDeployment's machine template labels
}

func (c *converter) note(o *object, n node, reason string) {
	v := ""
	switch x := n.v.(type) {
	case string:
		if len(x) > 60 {
			x = x[:57] + "..."
		}
		v = strconv.Quote(x)
	case int, int64, uint64, float64, bool:
		v = scalarJSON(n.v)
	}
	c.notes = append(c.notes, Note{Object: o.ref(), Path: n.path, Value: v, Reason: reason})
	n.use()
}

// noteRef reports a reference (already consumed), with what it names as
// its value.
func (c *converter) noteRef(o *object, ref node, kind, name, reason string) {
	c.notes = append(c.notes, Note{Object: o.ref(), Path: ref.path, Value: strconv.Quote(kind + "/" + name), Reason: reason})
}

// noteObject reports the whole of o: none of its fields is reported
// again.
func (c *converter) noteObject(o *object, reason string) {
	c.notes = append(c.notes, Note{Object: o.ref(), Reason: reason})
	o.useAll()
}

// find returns the object a reference names, or nil.
func (c *converter) find(kind, name string) *object { return c.byRef[kind+"/"+name] }

// resolve reads a reference (v1beta1 {apiVersion, kind, name, namespace}
// or v1beta2 {apiGroup, kind, name}) and returns its kind, name and the
// object when the input holds it.
func (c *converter) resolve(ref node) (kind, name string, o *object) {
	kind, _ = ref.field("kind").str()
	name, _ = ref.field("name").str()
	for _, f := range []string{"apiVersion", "apiGroup", "namespace"} {
		ref.field(f).use()
	}
	if o = c.find(kind, name); o != nil {
		c.claimed[o] = true
	}
	return kind, name, o
}

func (c *converter) pickCluster() (*object, error) {
	var all []*object
	for _, o := range c.objs {
		if o.kind == "Cluster" && o.group() == GroupCore {
			all = append(all, o)
		}
	}
	switch {
	case len(all) == 0:
		return nil, ErrNoCluster
	case c.opts.Cluster != "":
		for _, o := range all {
			if o.name == c.opts.Cluster {
				return o, nil
			}
		}
		return nil, fmt.Errorf("no Cluster named %q in the input (it has %s)", c.opts.Cluster, names(all))
	case len(all) > 1:
		return nil, fmt.Errorf("%w (%s): pick one", ErrAmbiguous, names(all))
	}
	return all[0], nil
}

func names(objs []*object) string {
	var out []string
	for _, o := range objs {
		out = append(out, o.name)
	}
	return strings.Join(out, ", ")
}

// convert builds c.out from the Cluster cl and what it references.
func (c *converter) convert(cl *object) error {
	switch v := cl.version(); v {
	case "v1beta1", "v1beta2":
	default:
		return fmt.Errorf("%w: %s is %s; capn import reads v1beta1 and v1beta2 (clusterctl upgrade converts older ones)", ErrUnsupportedVersion, cl.ref(), cl.apiVersion)
	}
	c.claimed[cl] = true
	c.name = cl.name
	c.cluster = cl
	c.namespace, _ = cl.at().get("metadata.namespace").v.(string)
	c.healthFrom = map[string]string{}
	c.out = &capnv1.Cluster{
		ApiVersion: manifest.APIVersion, Kind: manifest.KindCluster,
		Metadata: &capnv1.ObjectMeta{Name: cl.name},
		Spec:     &capnv1.ClusterSpec{},
	}
	if strings.Contains(cl.name, "${") {
		return fmt.Errorf("%s: the name has an unsubstituted variable: render the template first (clusterctl generate cluster)", cl.ref())
	}
	if err := c.clusterSpec(cl); err != nil {
		return err
	}
	for _, o := range c.objs {
		if o.kind == "MachineDeployment" && o.group() == GroupCore && c.belongs(o) {
			if err := c.addPool(o); err != nil {
				return err
			}
		}
	}
	for _, o := range c.objs {
		if o.kind == "MachineHealthCheck" && o.group() == GroupCore && c.belongs(o) {
			c.healthCheck(o)
		}
	}
	for _, name := range c.poolOrder {
		c.out.Spec.WorkerPools = append(c.out.Spec.WorkerPools, c.pools[name].spec)
	}
	return nil
}

// belongs says whether o names the imported cluster in spec.clusterName
// (or its cluster-name label).
func (c *converter) belongs(o *object) bool {
	n := o.at()
	cn, ok := n.get("spec.clusterName").str()
	if !ok {
		cn = n.get("metadata.labels").stringMap()["cluster.x-k8s.io/cluster-name"]
	}
	if cn == c.name {
		c.claimed[o] = true
		return true
	}
	return false
}

// reportLeftovers notes the objects the cluster does not use, and every
// field of the used ones that was not consumed, then puts every note in
// the input's order.
func (c *converter) reportLeftovers() {
	for _, o := range c.objs {
		if !c.claimed[o] {
			c.noteObject(o, c.leftoverReason(o))
			continue
		}
		if ns := o.at().get("metadata.namespace"); o != c.cluster && c.namespace != "" && ns.v == any(c.namespace) { // no panic: a mapping is of another type
			ns.use() // the Cluster's namespace: its note says capn has none
		}
		for _, n := range o.unmapped() {
			c.note(o, n, reasonFor(o, n.path))
		}
	}
	objIndex := map[string]int{}
	pathIndex := map[string]map[string]int{}
	for i, o := range c.objs {
		if _, dup := objIndex[o.ref()]; !dup {
			objIndex[o.ref()] = i
			pathIndex[o.ref()] = o.pathOrder()
		}
	}
	pos := func(n Note) (int, int) {
		if n.Path == "" {
			return objIndex[n.Object], -1
		}
		if i, ok := pathIndex[n.Object][n.Path]; ok {
			return objIndex[n.Object], i
		}
		return objIndex[n.Object], math.MaxInt
	}
	seen := map[Note]bool{}
	c.notes = slices.DeleteFunc(c.notes, func(n Note) bool { // a template two pools share is read twice
		dup := seen[n]
		seen[n] = true
		return dup
	})
	slices.SortStableFunc(c.notes, func(a, b Note) int {
		ao, ap := pos(a)
		bo, bp := pos(b)
		return cmp.Or(cmp.Compare(ao, bo), cmp.Compare(ap, bp))
	})
}
