package manifest

import (
	"google.golang.org/protobuf/types/known/durationpb"
	"time"

	"errors"
	"slices"
	"strconv"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Version skew the validator allows, after the Kubernetes skew policy: a
// kubelet may be up to three minor versions older than the API server, never
// newer.
const MaxPoolMinorLag = 3

// MaxControlPlaneReplicas is the largest control plane: etcd beyond seven
// members only slows writes.
const MaxControlPlaneReplicas = 7

// Default bounds on machines: a spec asking for more is refused (the
// gateway at apply, the cluster-planner for a stored spec) before anything
// plans that many machines. Operators raise them on both with
// --max-pool-replicas and --max-cluster-replicas.
const (
	DefaultMaxPoolReplicas    = 1000
	DefaultMaxClusterReplicas = 5000
)

// Validator checks clusters. Its zero value uses KnownBootstrapProviders
// and the default replica bounds.
type Validator struct {
	// BootstrapProviders are the accepted bootstrap provider names; nil means
	// KnownBootstrapProviders.
	BootstrapProviders []string
	// MaxPoolReplicas bounds a worker pool's replicas; 0 means
	// DefaultMaxPoolReplicas.
	MaxPoolReplicas int
	// MaxClusterReplicas bounds a cluster's machines, the control plane's
	// and every pool's replicas together; 0 means DefaultMaxClusterReplicas.
	MaxClusterReplicas int
}

func (v Validator) maxPool() int64 {
	if v.MaxPoolReplicas > 0 {
		return int64(v.MaxPoolReplicas)
	}
	return DefaultMaxPoolReplicas
}

func (v Validator) maxCluster() int64 {
	if v.MaxClusterReplicas > 0 {
		return int64(v.MaxClusterReplicas)
	}
	return DefaultMaxClusterReplicas
}

// Validate checks c with the zero Validator.
func Validate(c *capnv1.Cluster) error { return Validator{}.Validate(c) }

// ValidateUpdate checks an update with the zero Validator.
func ValidateUpdate(old, c *capnv1.Cluster) error {
	return Validator{}.ValidateUpdate(old, c)
}

// Validate reports every bad field of c at once, as errors.Join of
// *FieldError, each naming the path, the value, why it is refused and what is
// allowed. It expects a defaulted cluster (see Default) but accepts optional
// fields left empty as meaning their default. It returns nil when c is valid.
func (v Validator) Validate(c *capnv1.Cluster) error {
	if c == nil {
		return &FieldError{Path: "(document)", Reason: "no cluster"}
	}
	var errs fieldErrors
	v.validate(c, &errs)
	return errors.Join(errs...)
}

func (v Validator) validate(c *capnv1.Cluster, errs *fieldErrors) {
	if c.ApiVersion != APIVersion {
		errs.add("apiVersion", c.ApiVersion, "must be %s", APIVersion)
	}
	if c.Kind != KindCluster {
		errs.add("kind", c.Kind, "must be %s", KindCluster)
	}
	validateMeta(c.Metadata, "metadata", errs)
	s := c.Spec
	if s == nil {
		errs.add("spec", nil, "required")
		return
	}
	sp := path("spec")
	cpVersion, cpVersionOK := Version{}, false
	switch {
	case s.KubernetesVersion == "":
		errs.add(sp.child("kubernetesVersion"), nil, "required: the control plane's Kubernetes version, e.g. v1.34.2")
	default:
		var err error
		cpVersion, err = ParseVersion(s.KubernetesVersion)
		if err != nil {
			errs.add(sp.child("kubernetesVersion"), s.KubernetesVersion, "must be vMAJOR.MINOR.PATCH, e.g. v1.34.2")
		}
		cpVersionOK = err == nil
	}
	v.validateControlPlane(s.ControlPlane, sp.child("controlPlane"), errs)
	if s.ControlPlane != nil {
		validateFormat(s.Bootstrap, s.ControlPlane.Bootstrap, sp.child("controlPlane"), errs)
	}
	names := map[string]int{}
	for i, p := range s.WorkerPools {
		pp := sp.child("workerPools").index(i)
		if p == nil {
			errs.add(pp, nil, "must not be null")
			continue
		}
		if j, dup := names[p.Name]; dup && p.Name != "" {
			errs.add(pp.child("name"), p.Name, "duplicate: spec.workerPools[%d] has the same name; pool names are unique", j)
		} else {
			names[p.Name] = i
		}
		v.validatePool(p, pp, s.KubernetesVersion, cpVersion, cpVersionOK, errs)
		validateOS(p.Os, s.Bootstrap, p.Bootstrap, pp, errs)
		validateFormat(s.Bootstrap, p.Bootstrap, pp, errs)
	}
	v.validateTotal(s, sp, errs)
	validateNetwork(s.Network, sp.child("network"), errs)
	v.validateBootstrap(s.Bootstrap, sp.child("bootstrap"), OSLinux, errs)
	validateHealth(s.Health, sp.child("health"), errs)
	validateMaintenance(s.Maintenance, cpVersion, cpVersionOK, sp.child("maintenance"), errs)
	validateHibernation(s.Hibernation, sp.child("hibernation"), errs)
	validateEtcdSnapshots(s.EtcdSnapshots, s.Bootstrap.GetProvider(), sp.child("etcdSnapshots"), errs)
}

// Bounds of spec.etcdSnapshots.
const (
	MinEtcdSnapshotEvery = time.Minute
	MaxEtcdSnapshotKeep  = 100
)

// validateEtcdSnapshots checks the scheduled etcd snapshots: only for a
// control plane capn runs (kube-local), every at least a minute, keep
// from 1 to 100 (0: the default, 5).
func validateEtcdSnapshots(e *capnv1.EtcdSnapshotPolicy, provider string, p path, errs *fieldErrors) {
	if e == nil {
		return
	}
	if provider != "kube-local" {
		if provider == "" {
			provider = "kubeadm"
		}
		errs.add(p, nil, "only for a control plane capn runs (spec.bootstrap.provider kube-local), not %s: capn has no access to that etcd", provider)
	}
	if d := e.GetEvery().AsDuration(); e.GetEvery() != nil && d < MinEtcdSnapshotEvery {
		errs.add(p.child("every"), d, "must be at least %s (unset: snapshots only on demand, capn etcd snapshot)", MinEtcdSnapshotEvery)
	}
	if k := e.GetKeep(); k < 0 || k > MaxEtcdSnapshotKeep {
		errs.add(p.child("keep"), k, "must be from 1 to %d (0 or unset: 5)", MaxEtcdSnapshotKeep)
	}
}

func validateMeta(m *capnv1.ObjectMeta, p path, errs *fieldErrors) {
	if m == nil {
		errs.add(p.child("name"), nil, "required")
		return
	}
	switch {
	case m.Name == "":
		errs.add(p.child("name"), nil, "required")
	case !IsDNSLabel(m.Name):
		errs.add(p.child("name"), m.Name, dnsLabelRule)
	}
	validateLabels(m.Labels, p.child("labels"), errs)
	for _, k := range sortedKeys(m.Annotations) {
		if !IsQualifiedName(k) {
			errs.add(p.child("annotations").key(k), nil, "key %s", qualifiedNameRule)
		}
	}
}

func (v Validator) validateControlPlane(cp *capnv1.ControlPlaneSpec, p path, errs *fieldErrors) {
	if cp == nil {
		errs.add(p, nil, "required: the control plane's provider and replicas")
		return
	}
	// Each implementation's own settings, and their absence with another type.
	validateExternal(cp, p, errs)
	validateHosted(cp, p, errs)
	switch cp.Type {
	case "", capnv1.ControlPlaneMachines:
	case capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal:
		v.validateNonMachineControlPlane(cp, p, errs)
		return
	default:
		errs.add(p.child("type"), cp.Type, "must be one of %s (empty: %s): the control plane's implementation",
			strings.Join(capnv1.ControlPlaneTypes, ", "), capnv1.ControlPlaneMachines)
		return
	}
	validateProvider(cp.Provider, p.child("provider"), errs)
	r := cp.Replicas
	if r <= 0 || r%2 == 0 || r > MaxControlPlaneReplicas {
		errs.add(p.child("replicas"), r, "must be odd and between 1 and %d (1, 3, 5 or 7): etcd needs an odd number of members for quorum", MaxControlPlaneReplicas)
	}
	if cp.MaxSurge != nil {
		switch s := *cp.MaxSurge; {
		case s != 0 && s != 1:
			errs.add(p.child("maxSurge"), s, "must be 0 or 1: the control plane rolls one machine at a time")
		case s == 0 && r < 3:
			errs.add(p.child("maxSurge"), s, "0 needs 3 or more replicas (have %d): removing a machine before adding one would lose etcd quorum; use 1", r)
		}
	}
	switch cp.Os {
	case "", OSLinux:
	case OSWindows:
		errs.add(p.child("os"), cp.Os, "the control plane runs on %s only (as in Cluster API): put %s nodes in a worker pool", OSLinux, OSWindows)
	default:
		errs.add(p.child("os"), cp.Os, "must be %s (empty: %s); the control plane runs on %s only", OSLinux, OSLinux, OSLinux)
	}
	validateTemplate(cp.Template, p.child("template"), errs)
	v.validateBootstrap(cp.Bootstrap, p.child("bootstrap"), OSLinux, errs)
	validateNodeTimeouts(cp.NodeDrainTimeout, cp.NodeDeletionTimeout, p, errs)
}

// validateNonMachineControlPlane checks a control plane of type hosted or
// external: no machine is made for it, so the fields that shape control-plane
// machines (provider, template, maxSurge, os) must be empty; replicas counts
// its API servers (1 for external: capn does not run them). The
// implementation's own settings are checked with its fields.
func (v Validator) validateNonMachineControlPlane(cp *capnv1.ControlPlaneSpec, p path, errs *fieldErrors) {
	noMachines := func(field string, value any) {
		errs.add(p.child(field), value, "must be empty for controlPlane.type %s: it shapes control-plane machines, and a %s control plane has none", cp.Type, cp.Type)
	}
	if cp.Provider != "" {
		noMachines("provider", cp.Provider)
	}
	if cp.Template != nil {
		noMachines("template", nil)
	}
	if cp.MaxSurge != nil {
		noMachines("maxSurge", *cp.MaxSurge)
	}
	if cp.Os != "" {
		noMachines("os", cp.Os)
	}
	switch r := cp.Replicas; {
	case r <= 0 || r > MaxControlPlaneReplicas:
		errs.add(p.child("replicas"), r, "must be between 1 and %d: the API servers of the control plane", MaxControlPlaneReplicas)
	case cp.Type == capnv1.ControlPlaneExternal && r != 1:
		// Its record always says 1: a change would be accepted and do nothing.
		errs.add(p.child("replicas"), r, "must be 1 (or unset) for controlPlane.type external: capn neither runs nor scales the API servers of a control plane someone else runs")
	}
}

// validateNodeTimeouts checks a pool's or the control plane's
// nodeDrainTimeout and nodeDeletionTimeout: unset or 0 means the default
// (drain: no limit; Node deletion: 10s), negative is refused.
func validateNodeTimeouts(drain, deletion *durationpb.Duration, p path, errs *fieldErrors) {
	if drain != nil && drain.AsDuration() < 0 {
		errs.add(p.child("nodeDrainTimeout"), drain.AsDuration(), "must not be negative (unset or 0: drain for as long as it takes)")
	}
	if deletion != nil && deletion.AsDuration() < 0 {
		errs.add(p.child("nodeDeletionTimeout"), deletion.AsDuration(), "must not be negative (unset or 0: the default, 10s)")
	}
}

// cpRaw is spec.kubernetesVersion as written, cp the version it parses to
// (cpOK).
func (v Validator) validatePool(pool *capnv1.WorkerPool, p path, cpRaw string, cp Version, cpOK bool, errs *fieldErrors) {
	switch {
	case pool.Name == "":
		errs.add(p.child("name"), nil, "required")
	case pool.Name == ControlPlanePool:
		errs.add(p.child("name"), pool.Name, "reserved for the control plane's machines; choose another pool name")
	case !IsDNSLabel(pool.Name):
		errs.add(p.child("name"), pool.Name, dnsLabelRule)
	}
	validateProvider(pool.Provider, p.child("provider"), errs)
	switch {
	case pool.Replicas < 0:
		errs.add(p.child("replicas"), pool.Replicas, "must be 0 or more")
	case int64(pool.Replicas) > v.maxPool():
		errs.add(p.child("replicas"), pool.Replicas, "must be at most %d per pool (the gateway's and cluster-planner's --max-pool-replicas)", v.maxPool())
	}
	if pool.Version != "" {
		pv, err := ParseVersion(pool.Version)
		switch {
		case err != nil && pool.Version == cpRaw:
			// The pool took spec.kubernetesVersion (Default, or an upgrade
			// of the pools that followed it): one error, there.
		case err != nil:
			errs.add(p.child("version"), pool.Version, "must be vMAJOR.MINOR.PATCH, e.g. v1.34.2, or empty for the cluster's kubernetesVersion")
		case !cpOK:
		case pv.Major != cp.Major:
			errs.add(p.child("version"), pool.Version, "must have the control plane's major version (%s)", cp)
		case pv.Compare(cp) > 0:
			errs.add(p.child("version"), pool.Version, "newer than the control plane (%s): a pool may lag the control plane but never lead it; upgrade spec.kubernetesVersion first", cp)
		case cp.MinorsAfter(pv) > MaxPoolMinorLag:
			errs.add(p.child("version"), pool.Version, "%d minor versions behind the control plane (%s): the Kubernetes skew policy allows at most %d", cp.MinorsAfter(pv), cp, MaxPoolMinorLag)
		}
	}
	validateTemplate(pool.Template, p.child("template"), errs)
	validateLabels(pool.Labels, p.child("labels"), errs)
	validateTaints(pool.Taints, p.child("taints"), errs)
	validateStrategy(pool.Strategy, p.child("strategy"), errs)
	switch pool.DeletionOrder {
	case "", DeletionOrderRandom, DeletionOrderNewest, DeletionOrderOldest:
	default:
		errs.add(p.child("deletionOrder"), pool.DeletionOrder, "must be %s, %s or %s", DeletionOrderRandom, DeletionOrderNewest, DeletionOrderOldest)
	}
	v.validateBootstrap(pool.Bootstrap, p.child("bootstrap"), OSOf(pool.Os), errs)
	validateHealth(pool.Health, p.child("health"), errs)
	validateNodeTimeouts(pool.NodeDrainTimeout, pool.NodeDeletionTimeout, p, errs)
	v.validateAutoscaling(pool, p, errs)
}

// validateTotal bounds the cluster's machines: the control plane's and the
// worker pools' replicas together.
func (v Validator) validateTotal(s *capnv1.ClusterSpec, sp path, errs *fieldErrors) {
	total := int64(0)
	if s.GetControlPlane().Implementation() == capnv1.ControlPlaneMachines {
		total = int64(s.GetControlPlane().GetReplicas()) // the others make no machines
	}
	for _, p := range s.WorkerPools {
		total += max(0, int64(p.GetReplicas()))
	}
	if total > v.maxCluster() {
		errs.add(sp.child("workerPools"), nil, "%d machines in all (control plane and worker pools' replicas): must be at most %d per cluster (the gateway's and cluster-planner's --max-cluster-replicas)", total, v.maxCluster())
	}
}

func validateProvider(name string, p path, errs *fieldErrors) {
	switch {
	case name == "":
		errs.add(p, nil, "required: the infrastructure provider's name, e.g. sim")
	case !IsDNSLabel(name):
		errs.add(p, name, dnsLabelRule)
	}
}

func validateTemplate(t *capnv1.MachineTemplate, p path, errs *fieldErrors) {
	if t == nil {
		return
	}
	if _, ok := t.Parameters[""]; ok {
		errs.add(p.child("parameters").key(""), nil, "parameter names must not be empty")
	}
}

func validateStrategy(s *capnv1.RolloutStrategy, p path, errs *fieldErrors) {
	if s == nil {
		return
	}
	switch s.Type {
	case "", StrategyRollingUpdate:
		surgeOK := validateIntOrPercent(s.MaxSurge, p.child("maxSurge"), errs)
		unavOK := validateIntOrPercent(s.MaxUnavailable, p.child("maxUnavailable"), errs)
		surge, unav := s.MaxSurge, s.MaxUnavailable
		if surge == "" {
			surge = DefaultMaxSurge
		}
		if unav == "" {
			unav = DefaultMaxUnavailable
		}
		if surgeOK && unavOK && isZero(surge) && isZero(unav) {
			errs.add(p, nil, "maxSurge and maxUnavailable are both 0, so a rollout could never start: allow a surge (maxSurge: 1) or an unavailable machine (maxUnavailable: 1)")
		}
	case StrategyOnDelete:
		if s.MaxSurge != "" {
			errs.add(p.child("maxSurge"), s.MaxSurge, "must be empty with type OnDelete: OnDelete only replaces the machines you delete")
		}
		if s.MaxUnavailable != "" {
			errs.add(p.child("maxUnavailable"), s.MaxUnavailable, "must be empty with type OnDelete: OnDelete only replaces the machines you delete")
		}
	default:
		errs.add(p.child("type"), s.Type, "must be %s or %s", StrategyRollingUpdate, StrategyOnDelete)
	}
}

// validateIntOrPercent accepts "", a count or a percentage from 0% to 100%.
func validateIntOrPercent(s string, p path, errs *fieldErrors) bool {
	if s == "" {
		return true
	}
	m := intOrPercentRE.FindStringSubmatch(s)
	if m == nil {
		errs.add(p, s, "must be a non-negative count (\"1\") or a percentage from 0%% to 100%% (\"25%%\")")
		return false
	}
	if n, _ := strconv.Atoi(m[1]); m[2] == "%" && n > 100 {
		errs.add(p, s, "a percentage must be from 0%% to 100%%")
		return false
	}
	return true
}

func isZero(s string) bool { return s == "0" || s == "0%" }

func validateLabels(labels map[string]string, p path, errs *fieldErrors) {
	for _, k := range sortedKeys(labels) {
		if !IsQualifiedName(k) {
			errs.add(p.key(k), nil, "key %s", qualifiedNameRule)
		}
		if v := labels[k]; !IsLabelValue(v) {
			errs.add(p.key(k), v, labelValueRule)
		}
	}
}

func validateTaints(taints []*capnv1.Taint, p path, errs *fieldErrors) {
	seen := map[string]int{}
	for i, t := range taints {
		tp := p.index(i)
		if t == nil {
			errs.add(tp, nil, "must not be null")
			continue
		}
		switch {
		case t.Key == "":
			errs.add(tp.child("key"), nil, "required")
		case !IsQualifiedName(t.Key):
			errs.add(tp.child("key"), t.Key, qualifiedNameRule)
		}
		if !IsLabelValue(t.Value) {
			errs.add(tp.child("value"), t.Value, labelValueRule)
		}
		switch t.Effect {
		case TaintNoSchedule, TaintPreferNoSchedule, TaintNoExecute:
		case "":
			errs.add(tp.child("effect"), nil, "required: %s, %s or %s", TaintNoSchedule, TaintPreferNoSchedule, TaintNoExecute)
		default:
			errs.add(tp.child("effect"), t.Effect, "must be %s, %s or %s", TaintNoSchedule, TaintPreferNoSchedule, TaintNoExecute)
		}
		k := t.Key + ":" + t.Effect
		if j, dup := seen[k]; dup {
			errs.add(tp, nil, "duplicate of %s: a key may appear once per effect", p.index(j))
		}
		seen[k] = i
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
