package addonmanager

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Reasons of a record's Applied condition.
const (
	ReasonApplied                = "Applied"
	ReasonApplying               = "Applying"
	ReasonApplyFailed            = "ApplyFailed"
	ReasonWaitingForOrder        = "WaitingForOrder"
	ReasonWaitingForControlPlane = "WaitingForControlPlane"
	ReasonNoKubernetesAPI        = "NoKubernetesAPI"
	ReasonRemoving               = "Removing"
)

// Input is what Plan knows of one cluster: the cluster, whether capn may
// talk to its API server, every add-on set, and the records of the sets
// on this cluster.
type Input struct {
	Name string
	// Cluster is the desired cluster; nil when it is gone.
	Cluster *capnv1.Cluster
	// Initialized: the control plane was initialised (the planner's
	// status.control_plane_initialized).
	Initialized bool
	// API: the cluster has an API server to apply to (a hosted or
	// external control plane, or one on machines whose provider announces
	// real-kubernetes: clusterkubeconfig.HasAPIServer). Sets selecting a
	// cluster without one are recorded as NoKubernetesAPI and never
	// applied.
	API bool
	// Sets are every add-on set, in any order.
	Sets []*capnv1.AddonSet
	// Hashes are the sets' content hashes now (objectsHash), by name; a
	// set whose content cannot be read (an add-on secret missing or not
	// opening) has none and its reason in Unreadable.
	Hashes     map[string]string
	Unreadable map[string]string
	// Records are this cluster's records, by set name.
	Records map[string]*capnv1.ClusterAddonStatus
	Now     time.Time
	// Backoff is the wait after attempts failed applies in a row.
	Backoff func(attempts int32) time.Duration
}

// StepKind is what a step does.
type StepKind int

// Steps, in the order Plan emits them: removals first (a set that stops
// selecting the cluster), then each selected set in order.
const (
	// StepForget deletes the record: the cluster or the set is gone, or
	// the set leaves its objects.
	StepForget StepKind = iota
	// StepRemove deletes the record's objects from the cluster (in reverse
	// order), then the record.
	StepRemove
	// StepApply applies the set (its objects in order) and records the
	// outcome; Prune also deletes the objects of the record's last apply
	// that the set no longer has.
	StepApply
	// StepRecord writes Record (a condition changed; nothing to apply).
	StepRecord
)

func (k StepKind) String() string {
	return [...]string{"forget", "remove", "apply", "record"}[k]
}

// Step is one thing to do for one set.
type Step struct {
	Kind StepKind
	Set  string
	// AddonSet is the set (StepApply).
	AddonSet *capnv1.AddonSet
	// Record is the record to write (StepRecord), or the record the step
	// starts from (StepApply, StepRemove; nil for a first apply).
	Record *capnv1.ClusterAddonStatus
	Prune  bool
	// Why an apply is due: never applied, the set changed, its content
	// changed, its reconcile interval passed.
	Why string
}

// Result is one plan: the steps and when to plan again if nothing wakes
// the cluster before (0: not before a change).
type Result struct {
	Steps        []Step
	RequeueAfter time.Duration
}

// Fields counts the steps for one log line.
func (r Result) Fields() map[string]any {
	f := map[string]any{"forget": 0, "remove": 0, "apply": 0, "record": 0}
	for _, s := range r.Steps {
		f[s.Kind.String()] = f[s.Kind.String()].(int) + 1
	}
	if r.RequeueAfter > 0 {
		f["requeue_after"] = r.RequeueAfter.String()
	}
	return f
}

// Plan decides one cluster's next steps. It is pure: no I/O, no clock
// but in.Now.
//
//   - The cluster gone or being deleted: every record is forgotten (its
//     objects go with the cluster).
//   - A record of a set that no longer selects the cluster (deleted, or
//     its selector, the cluster's labels or its opt-out changed): its
//     objects are deleted when the record says onRemove Delete and the API
//     server can be reached, then the record is forgotten.
//   - Each selected set, by (order, name): recorded as NoKubernetesAPI or
//     WaitingForControlPlane until it can be applied; WaitingForOrder while
//     a set of a lower order is not applied; applied when it never was (or
//     the record is of an older incarnation of the set), and — Reconcile
//     mode — when its generation or content changed or its reconcile
//     interval passed. A failed apply is tried again after Backoff.
func Plan(in Input) Result {
	var res Result
	wake := func(d time.Duration) {
		if d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
			res.RequeueAfter = d
		}
	}
	names := sortedKeys(in.Records)
	if in.Cluster == nil || in.Cluster.GetMetadata().GetDeletionTimestamp() != nil {
		for _, n := range names {
			res.Steps = append(res.Steps, Step{Kind: StepForget, Set: n, Record: in.Records[n]})
		}
		return res
	}
	var selected []*capnv1.AddonSet
	for _, s := range in.Sets {
		if manifest.AddonSetSelects(s, in.Cluster) {
			selected = append(selected, s)
		}
	}
	slices.SortFunc(selected, func(a, b *capnv1.AddonSet) int {
		return cmp.Or(cmp.Compare(a.GetSpec().GetOrder(), b.GetSpec().GetOrder()), strings.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName()))
	})
	isSelected := map[string]bool{}
	for _, s := range selected {
		isSelected[s.GetMetadata().GetName()] = true
	}
	for _, n := range names {
		if isSelected[n] {
			continue
		}
		rec := in.Records[n]
		if rec.GetOnRemove() == manifest.AddonRemoveDelete && len(rec.GetObjects()) > 0 && in.API && in.Initialized {
			if wait := in.backoff(rec); wait > 0 {
				wake(wait)
				continue
			}
			res.Steps = append(res.Steps, Step{Kind: StepRemove, Set: n, Record: rec})
			continue
		}
		res.Steps = append(res.Steps, Step{Kind: StepForget, Set: n, Record: rec})
	}

	// pending is the first set of a lower order not applied yet.
	var pending *capnv1.AddonSet
	for i, s := range selected {
		name := s.GetMetadata().GetName()
		rec := in.Records[name]
		if rec.GetSetUid() != s.GetMetadata().GetUid() {
			rec = nil // of an earlier incarnation of the set: start over
		}
		if i > 0 && s.GetSpec().GetOrder() != selected[i-1].GetSpec().GetOrder() {
			for _, prev := range selected[:i] {
				if pending == nil && !manifest.AddonApplied(prev, in.Records[prev.GetMetadata().GetName()]) {
					pending = prev
				}
			}
		}
		want := func(reason, msg string) {
			if r := in.record(s, rec, false, reason, msg); !proto.Equal(r, in.Records[name]) {
				res.Steps = append(res.Steps, Step{Kind: StepRecord, Set: name, Record: r})
			}
		}
		switch {
		case !in.API:
			want(ReasonNoKubernetesAPI, "the cluster's control-plane provider runs no Kubernetes API server (it does not announce real-kubernetes): nothing is applied")
			continue
		case !in.Initialized:
			want(ReasonWaitingForControlPlane, "waiting for the control plane to be initialised")
			continue
		case in.Unreadable[name] != "":
			want(ReasonApplyFailed, in.Unreadable[name])
			continue
		case pending != nil:
			want(ReasonWaitingForOrder, fmt.Sprintf("waiting for set %s (order %d) to be applied first", pending.GetMetadata().GetName(), pending.GetSpec().GetOrder()))
			continue
		}
		hash := in.Hashes[name]
		due, why := in.due(s, rec, hash)
		if !due {
			if r := in.record(s, rec, true, ReasonApplied, appliedMessage(s, rec, hash)); !proto.Equal(r, in.Records[name]) {
				res.Steps = append(res.Steps, Step{Kind: StepRecord, Set: name, Record: r})
			}
			if s.GetSpec().GetMode() == manifest.AddonReconcile {
				wake(rec.GetLastApplied().AsTime().Add(interval(s)).Sub(in.Now))
			}
			continue
		}
		if wait := in.backoff(rec); wait > 0 {
			wake(wait)
			continue
		}
		prune := rec != nil && s.GetSpec().GetOnRemove() == manifest.AddonRemoveDelete && len(rec.GetObjects()) > 0
		res.Steps = append(res.Steps, Step{Kind: StepApply, Set: name, AddonSet: s, Record: rec, Prune: prune, Why: why})
	}
	return res
}

// due says whether set s must be applied now, and why.
func (in Input) due(s *capnv1.AddonSet, rec *capnv1.ClusterAddonStatus, hash string) (bool, string) {
	switch {
	case rec == nil || rec.GetAppliedHash() == "":
		return true, "never applied"
	case s.GetSpec().GetMode() != manifest.AddonReconcile:
		return false, "" // ApplyOnce: applied once is applied for good
	case rec.GetAppliedGeneration() != s.GetMetadata().GetGeneration():
		return true, "the set changed"
	case rec.GetAppliedHash() != hash:
		return true, "its content changed"
	case !in.Now.Before(rec.GetLastApplied().AsTime().Add(interval(s))):
		return true, "its reconcile interval passed"
	}
	return false, ""
}

// backoff is how long a record's failed applies still hold the next.
func (in Input) backoff(rec *capnv1.ClusterAddonStatus) time.Duration {
	if rec.GetAttempts() == 0 || rec.GetLastAttempt() == nil || in.Backoff == nil {
		return 0
	}
	return rec.GetLastAttempt().AsTime().Add(in.Backoff(rec.GetAttempts())).Sub(in.Now)
}

// record is the record of s on this cluster with its Applied condition
// (status true or false, reason, message), starting from rec (nil: a new
// one); the set's settings are copied as they are now.
func (in Input) record(s *capnv1.AddonSet, rec *capnv1.ClusterAddonStatus, ok bool, reason, msg string) *capnv1.ClusterAddonStatus {
	r := &capnv1.ClusterAddonStatus{}
	if rec != nil {
		r = proto.CloneOf(rec)
	}
	fillRecord(r, in.Name, s)
	st := capnv1.ConditionFalse
	if ok {
		st = capnv1.ConditionTrue
	}
	conditions.Set(&r.Conditions, conditions.New(manifest.AddonConditionApplied, st, reason, msg), in.Now)
	return r
}

// fillRecord copies who the record is about and the set's settings.
func fillRecord(r *capnv1.ClusterAddonStatus, cluster string, s *capnv1.AddonSet) {
	r.Cluster, r.AddonSet, r.SetUid = cluster, s.GetMetadata().GetName(), s.GetMetadata().GetUid()
	sp := s.GetSpec()
	r.Blocking, r.Mode, r.Order, r.OnRemove = sp.GetBlocking(), sp.GetMode(), sp.GetOrder(), sp.GetOnRemove()
}

// appliedMessage says what an applied record holds.
func appliedMessage(s *capnv1.AddonSet, rec *capnv1.ClusterAddonStatus, hash string) string {
	msg := fmt.Sprintf("%d objects applied (generation %d)", len(rec.GetObjects()), rec.GetAppliedGeneration())
	if s.GetSpec().GetMode() != manifest.AddonReconcile && (rec.GetAppliedGeneration() != s.GetMetadata().GetGeneration() || rec.GetAppliedHash() != hash) {
		msg += fmt.Sprintf("; the set changed since (generation %d): ApplyOnce does not apply it again", s.GetMetadata().GetGeneration())
	}
	return msg
}

// interval is a Reconcile set's reconcile interval.
func interval(s *capnv1.AddonSet) time.Duration {
	if d := s.GetSpec().GetReconcileInterval(); d != nil && d.AsDuration() >= manifest.MinAddonReconcileInterval {
		return d.AsDuration()
	}
	return manifest.DefaultAddonReconcileInterval
}

// Applied is the record of a successful apply of s at hash: the objects
// applied, the generation and hash, attempts reset.
func Applied(cluster string, s *capnv1.AddonSet, prev *capnv1.ClusterAddonStatus, hash string, objs []*capnv1.AddonObject, now time.Time) *capnv1.ClusterAddonStatus {
	r := &capnv1.ClusterAddonStatus{}
	if prev != nil {
		r = proto.CloneOf(prev)
	}
	fillRecord(r, cluster, s)
	r.AppliedGeneration, r.AppliedHash, r.Objects = s.GetMetadata().GetGeneration(), hash, objs
	r.LastError, r.Attempts = "", 0
	r.LastApplied, r.LastAttempt = timestamppb.New(now), timestamppb.New(now)
	conditions.Set(&r.Conditions, conditions.New(manifest.AddonConditionApplied, capnv1.ConditionTrue, ReasonApplied,
		fmt.Sprintf("%d objects applied (generation %d)", len(objs), r.AppliedGeneration)), now)
	return r
}

// Failed is the record of a failed apply (or removal, with reason
// Removing) of s: the error, one more attempt. What was applied before
// stays recorded. A Reconcile set that was applied keeps Applied True
// while a later apply fails (its objects are there, at an older
// content): the message says it failed.
func Failed(cluster string, s *capnv1.AddonSet, prev *capnv1.ClusterAddonStatus, reason string, err error, now time.Time) *capnv1.ClusterAddonStatus {
	r := &capnv1.ClusterAddonStatus{}
	if prev != nil {
		r = proto.CloneOf(prev)
	}
	if s != nil {
		if r.GetSetUid() != s.GetMetadata().GetUid() {
			r = &capnv1.ClusterAddonStatus{}
		}
		fillRecord(r, cluster, s)
	}
	r.LastError, r.Attempts, r.LastAttempt = err.Error(), r.GetAttempts()+1, timestamppb.New(now)
	msg := fmt.Sprintf("attempt %d failed: %v", r.Attempts, err)
	st := capnv1.ConditionFalse
	if reason == ReasonApplyFailed && r.GetAppliedHash() != "" && s != nil && s.GetSpec().GetMode() == manifest.AddonReconcile &&
		r.GetAppliedGeneration() == s.GetMetadata().GetGeneration() {
		st = capnv1.ConditionTrue // applied; re-applying it failed
		msg = fmt.Sprintf("applied (generation %d); applying it again failed (attempt %d): %v", r.AppliedGeneration, r.Attempts, err)
	}
	conditions.Set(&r.Conditions, conditions.New(manifest.AddonConditionApplied, st, reason, msg), now)
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
